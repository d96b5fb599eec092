"""Benchmark: 64 SGLD chains on one copy-head posterior, jaxdyn vs devinterp's SGLD.

Posterior: a softmax copy head, L = 16, V = 4, P = 40 sequences, T = sigma_w^2 = sigma_g^2 = 1,
SGLD over (W, G) with G = 4 g (G's step 16 times W's, as in copy-head-sgld) and the full-batch
gradient, 400 steps per chain from the same start, float32.

- jaxdyn: ``jaxdyn.copyhead._samplers.sgld_kernel`` (what ``sample_sgld`` runs) (blackjax SGLD, gradient written out from the
  sufficient statistics), the 64 chains as one ``jit(vmap(lax.scan))`` on one CPU device.
- baseline ``devinterp_sgld``: devinterp's SGLD (``SGMCMC.sgld``, the PyTorch library
  researchers use for SGLD on networks) on a PyTorch module with the same energy, the chains
  run as devinterp runs them: one after another through ``devinterp.slt.sampler.
  sample_single_chain`` (a DataLoader feeding the full batch, ``loss.backward()``,
  ``optimizer.step()`` per step). devinterp's update is theta -= (lr/2) n_beta grad(loss) +
  sqrt(lr) xi; with loss = E / P and n_beta = P it samples exp(-E) like blackjax's
  theta += h grad(-E) + sqrt(2 h) xi when lr = 2 h. Timed on ``--baseline-chains`` chains and
  scaled linearly to 64 (the chains are independent and sequential); the JSON says so.

Checks in the same run: one noise-free devinterp step equals the noise-free jaxdyn step
(relative difference), and the chains' final c_G agree in distribution (difference of means
over chains against 4 standard errors).

Needs the baseline's packages (never jaxdyn dependencies):
``pip install "torch==2.13.0+cpu" devinterp==2.0.1`` (CPU PyTorch; the script stops with
this line when either is missing, before any timing).

One core: torch and XLA are limited to one thread each; run as
``taskset -c 0 python benchmarks/bench_copy_head_sgld.py`` to pin both to one core.
Prints one JSON object and writes it to benchmarks/results/copy_head_sgld.json.
"""

import os

os.environ.setdefault("TQDM_DISABLE", "1")

from jaxdyn.distributed._devices import xla_cpu_setup  # noqa: E402

xla_cpu_setup()  # single-threaded matrix kernels, before JAX starts (XLA's default emitters)

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn.copyhead as ch  # noqa: E402
from jaxdyn.copyhead import _samplers

G_SCALE = 4.0
BASELINE_INSTALL = 'pip install "torch==2.13.0+cpu" devinterp==2.0.1'


def require_baseline_packages() -> None:
    """Stop with the install line when the devinterp baseline cannot run."""
    missing = [m for m in ("torch", "devinterp") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(
            f"bench_copy_head_sgld needs {' and '.join(missing)} for its baseline: "
            f"{BASELINE_INSTALL}"
        )


def torch_baseline(X, Y, L, V, P, h, steps, chains, W0, g0):
    """Run ``chains`` devinterp SGLD chains; returns (seconds, final G per chain, one step)."""
    import torch
    from devinterp.optim.sgmcmc import SGMCMC
    from devinterp.slt.sampler import sample_single_chain

    torch.set_num_threads(1)
    Xt, Yt = torch.tensor(np.asarray(X)), torch.tensor(np.asarray(Y))

    class CopyHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W = torch.nn.Parameter(torch.tensor(np.asarray(W0)))
            self.g = torch.nn.Parameter(torch.tensor(np.asarray(g0)))

    def evaluate(model, data):
        """Per-sequence loss whose mean times n_beta = P is the energy E."""
        idx = data["input_ids"]
        A = torch.softmax(G_SCALE * model.g, dim=-1)
        out = torch.einsum("lm,pmv,vw->plw", A, Xt[idx], model.W)
        sq = ((Yt[idx] - out) ** 2).sum(dim=(1, 2)) / 2.0
        prior = (V * (model.W**2).sum() + ((G_SCALE * model.g) ** 2).sum()) / 2.0
        return sq + prior / P, {}

    dataset = [{"input_ids": torch.tensor(i)} for i in range(P)]
    kwargs = dict(lr=2.0 * h, nbeta=float(P))
    finals = []

    def keep_final(chain, step, optimizer):
        if step == steps - 1:
            finals.append(G_SCALE * optimizer.param_groups[1]["params"][0].detach().numpy().copy())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        for chain in range(chains):
            sample_single_chain(
                CopyHead(),
                dataset,
                evaluate,
                {"W": None, "g": None},
                num_draws=steps,
                sampling_method=SGMCMC.sgld,
                sampling_method_kwargs=kwargs,
                chain=chain,
                seed=chain,
                batch_size=P,
                shuffle=False,
                step_callback=keep_final,
            )
        seconds = time.perf_counter() - t
        # One noise-free step from (W0, g0), for the convention check.
        model = CopyHead()
        opt = SGMCMC.sgld(model.parameters(), noise_level=0.0, **kwargs)
        loss, _ = evaluate(model, {"input_ids": torch.arange(P)})
        loss.mean().backward()
        opt.step()
    return seconds, np.stack(finals), (model.W.detach().numpy(), model.g.detach().numpy())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chains", type=int, default=64)
    parser.add_argument("--baseline-chains", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    require_baseline_packages()
    L, V, P = 16, 4, 40
    steps = 100 if args.quick else 400
    X, Y = ch.copy_task(jax.random.key(0), P, L, V)
    stats = ch.copy_statistics(X, Y)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    kernel = _samplers.sgld_kernel(posterior, G_SCALE)
    h = float(ch.sgld_step_size(posterior, stats))
    W0 = 0.01 * jax.random.normal(jax.random.key(2), (V, V))
    g0 = jnp.zeros((L, L))

    def chain(key):
        def one(p, k):
            return kernel.step(k, p, stats, h), None

        pos, _ = jax.lax.scan(one, {"W": W0, "g": g0}, jax.random.split(key, steps))
        return G_SCALE * pos["g"]

    batched = jax.jit(jax.vmap(chain))
    keys = jax.random.split(jax.random.key(1), args.chains)
    batched(keys).block_until_ready()

    def time_jax():
        t = time.perf_counter()
        batched(keys).block_until_ready()
        return time.perf_counter() - t

    jax_s = statistics.median(time_jax() for _ in range(args.reps))
    n_base = min(args.baseline_chains, args.chains)
    base_s, base_G, (W1, g1) = torch_baseline(X, Y, L, V, P, h, steps, n_base, W0, g0)
    base_total = base_s * args.chains / n_base
    # Convention: a noise-free blackjax step equals the noise-free devinterp step.
    det = kernel.step(jax.random.key(0), {"W": W0, "g": g0}, stats, h, temperature=0.0)
    step_diff = max(
        float(np.max(np.abs(np.asarray(det["W"]) - W1))),
        float(np.max(np.abs(np.asarray(det["g"]) - g1))),
    ) / float(np.max(np.abs(np.asarray(det["W"]))) + 1e-30)
    cG = lambda Gs: np.asarray(ch.order_parameters(jax.vmap(posterior.attention)(Gs))[1])
    a, b = cG(batched(keys)), cG(jnp.asarray(base_G))
    se = float(np.hypot(a.std(ddof=1) / np.sqrt(a.size), b.std(ddof=1) / np.sqrt(b.size)))
    ratio = base_total / jax_s
    result = {
        "benchmark": "copy_head_sgld_chains",
        "chains": args.chains,
        "steps": steps,
        "L": L,
        "V": V,
        "P": P,
        "dtype": "float32",
        "threads": 1,
        "load_average_1min": os.getloadavg()[0],
        "jaxdyn_s": jax_s,
        "jaxdyn_note": "jit(vmap(lax.scan)) of sgld_kernel, one device",
        "baseline_devinterp_sgld_s": base_total,
        "baseline_devinterp_sgld_note": (
            f"devinterp {importlib.metadata.version('devinterp')} SGMCMC.sgld via "
            f"sample_single_chain, chains in sequence; {n_base} chains timed "
            f"({base_s:.3f} s), scaled x{args.chains / n_base:g}"
        ),
        "ratio": ratio,
        "target_ratio": 20.0,
        "passed": bool(ratio >= 20.0),
        "noise_free_step_relative_difference": step_diff,
        "final_c_G_mean": {
            "jaxdyn": float(a.mean()),
            "devinterp": float(b.mean()),
            "difference_over_se": abs(float(a.mean() - b.mean())) / se,
        },
    }
    print(json.dumps(result))
    if not args.quick:  # the stored result is the full-size one
        from jaxdyn._atomic import atomic_write_text

        out = Path(__file__).resolve().parent / "results" / "copy_head_sgld.json"
        out.parent.mkdir(exist_ok=True)
        atomic_write_text(out, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
