"""Benchmark: the LLC of a copy-head network, jaxdyn.llc vs devinterp 2.0 (docs/llc.md).

Network and data: the softmax copy head of copy-head-llc's calibration (L = 3, V = 3, P = 20
sequences, a noiseless teacher at finite weights, w* = the teacher), float32. Matched
hyperparameters: n = 1e4, beta = 1 / ln n, localisation gamma = 1, full-batch gradients, no
burn-in (both start at w* and average every step), the same number of steps.

Step-size conventions: BlackJAX (jaxdyn) w += eps grad log p + sqrt(2 eps) xi; devinterp
w -= (lr / 2)(n_beta grad L + gamma (w - w*)) + sqrt(lr) xi, so lr = 2 eps. devinterp's loss is
per token (the mean over sequences and positions), jaxdyn's per sequence (L positions), so
devinterp's n_beta is L n beta: both sample exp(-n beta L_n(w) - gamma |w - w*|^2 / 2) and
estimate the same lambda.

- jaxdyn: ``jaxdyn.llc.estimate_llc``, the 64 chains as one vmapped program (first call with
  compilation, and a second call).
- devinterp: ``devinterp.slt.llc.llc`` (devinterp 2.0's entry point: a HuggingFace dataset of
  token ids and a per-token loss), its chains one after another.

Needs ``pip install "torch==2.13.0+cpu" devinterp==2.0.1`` (never jaxdyn dependencies).
Writes benchmarks/results/llc_devinterp.json (with ``uptime``: the machine is shared).
"""

import os

os.environ.setdefault("TQDM_DISABLE", "1")

from jaxdyn.distributed._devices import xla_cpu_setup  # noqa: E402

xla_cpu_setup()

import importlib.metadata  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxdyn import copyhead as ch  # noqa: E402
from jaxdyn.llc import estimate_llc  # noqa: E402

L, V, P = 3, 3, 20
N_SAMPLE = 1e4
EPS = 4e-5
GAMMA = 1.0
STEPS = int(os.environ.get("LLC_BENCH_STEPS", 200))
CHAINS = 64


def _teacher():
    kt, kg, kw = jax.random.split(jax.random.key(3), 3)
    X, _ = ch.copy_task(kt, P, L, V, dtype=jnp.float32)
    G0 = jnp.roll(jnp.eye(L), -1, axis=1) + 0.5 * jax.random.normal(kg, (L, L))
    W0 = jnp.eye(V) + 0.5 * jax.random.normal(kw, (V, V))
    return X, G0.astype(jnp.float32), W0.astype(jnp.float32)


def run_jax(X, G0, W0):
    head = ch.SoftmaxCopyHead()
    Y = head(G0, X, W0)

    def loss(w, batch):
        G, W = w
        return 0.5 * jnp.mean(jnp.sum((batch[1] - head(G, batch[0], W)) ** 2, axis=(1, 2)))

    def once(seed):
        t = time.perf_counter()
        est = estimate_llc(
            loss,
            (G0, W0),
            (X, Y),
            key=jax.random.key(seed),
            n=N_SAMPLE,
            num_chains=CHAINS,
            num_draws=STEPS,
            num_burnin=0,
            step_size=EPS,
            localization=GAMMA,
        )
        est.llc.block_until_ready()
        return est, time.perf_counter() - t

    est, cold = once(0)
    est2, warm = once(1)
    return est, cold, warm


def run_devinterp(X, G0, W0):
    import torch
    from datasets import Dataset
    from devinterp.slt.llc import llc

    torch.set_num_threads(1)
    ids = np.asarray(jnp.argmax(X, -1))
    ids = np.concatenate([ids, np.zeros((P, 1), ids.dtype)], axis=1)
    G0t, W0t = torch.tensor(np.asarray(G0)), torch.tensor(np.asarray(W0))

    def attend(G, ids_t, W):
        onehot = torch.nn.functional.one_hot(ids_t, V).to(torch.float32)
        return torch.einsum("lm,pmv,vw->plw", torch.softmax(G, -1), onehot, W)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.G = torch.nn.Parameter(G0t.clone())
            self.W = torch.nn.Parameter(W0t.clone())

    def token_loss(model, input_ids):  # (batch, L): 0.5 |f_l - y_l|^2 per position
        input_ids = input_ids[:, :L]  # devinterp wants (batch, seq - 1): one padding token
        target = attend(G0t, input_ids, W0t)
        return 0.5 * ((attend(model.G, input_ids, model.W) - target) ** 2).sum(-1)

    data = Dataset.from_dict({"input_ids": ids.tolist()}).with_format("torch")
    nbeta = L * N_SAMPLE / math.log(N_SAMPLE)
    t = time.perf_counter()
    out = llc(
        Head(),
        data,
        {},
        lr=2 * EPS,
        n_beta=nbeta,
        loss_fn=token_loss,
        num_chains=CHAINS,
        num_draws=STEPS,
        batch_size=P,
        num_burnin_steps=0,
        localization=GAMMA,
        num_init_loss_batches=1,
        shuffle=False,
    )
    return out, time.perf_counter() - t


def main():
    try:
        versions = {p: importlib.metadata.version(p) for p in ("torch", "devinterp")}
    except importlib.metadata.PackageNotFoundError as exc:
        sys.exit(f"needs {exc.name}: pip install 'torch==2.13.0+cpu' devinterp==2.0.1")
    up0 = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    X, G0, W0 = _teacher()
    est, cold, warm = run_jax(X, G0, W0)
    out, dev_s = run_devinterp(X, G0, W0)
    per = np.asarray(out["llc_per_chain"].values, dtype=float)
    dev_mean, dev_se = float(per.mean()), float(per.std(ddof=1) / math.sqrt(per.size))
    jm, jse = float(est.llc), float(est.stderr)
    diff, diff_se = jm - dev_mean, math.hypot(jse, dev_se)
    result = {
        "benchmark": "llc_devinterp",
        "network": {
            "head": "softmax",
            "L": L,
            "V": V,
            "P": P,
            "d": L * L + V * V,
            "exact_llc_symmetry_count": (L * L + V * V - L) / 2,
        },
        "settings": {
            "n": N_SAMPLE,
            "beta": 1 / math.log(N_SAMPLE),
            "chains": CHAINS,
            "steps_per_chain": STEPS,
            "burnin": 0,
            "localization": GAMMA,
            "blackjax_step_size": EPS,
            "devinterp_lr": 2 * EPS,
            "devinterp_n_beta": L * N_SAMPLE / math.log(N_SAMPLE),
            "dtype": "float32",
            "batch": "full",
        },
        "jaxdyn": {
            "llc": jm,
            "stderr": jse,
            "seconds_first_call": cold,
            "seconds_second_call": warm,
        },
        "devinterp": {
            "llc": dev_mean,
            "stderr": dev_se,
            "seconds": dev_s,
            "llc_mean_reported": float(out["llc_mean"]),
        },
        "difference": {
            "value": diff,
            "stderr": diff_se,
            "z": diff / diff_se,
            "agree_at_3_se": abs(diff) <= 3 * diff_se,
        },
        "speed_ratio_first_call": dev_s / cold,
        "speed_ratio_second_call": dev_s / warm,
        "versions": {**versions, "jax": jax.__version__},
        "uptime_before": up0,
        "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "command": "PYTHONPATH=$PWD python benchmarks/bench_llc_devinterp.py",
    }
    text = json.dumps(result, indent=2)
    print(text)
    Path(__file__).parent.joinpath("results", "llc_devinterp.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
