"""Validation and recording shared by the particle experiments."""

from __future__ import annotations

from jaxdyn.runs import ConfigError


def check_variants(variants, allowed, d) -> None:
    """Non-empty, known variants; multi-head (2 heads) needs an even ``d``."""
    if d < 1 or not variants or not set(variants) <= set(allowed):
        raise ConfigError(f"d >= 1 and no unknown variants (from {list(allowed)}): {d}, {variants}")
    if "multihead" in variants and d % 2:
        raise ConfigError(f"multihead uses 2 heads, so d must be even, got d={d}")


def check_sizes(config, *names, divide=False, empty=False) -> None:
    """Each named tuple holds >= 2 even sizes (dividing the largest with ``divide``, the
    nested samples' static shape); ``empty`` allows none (the check is not run)."""
    for name in names:
        sizes = getattr(config, name)
        if empty and not sizes:
            continue
        if len(sizes) < 2 or any(n < 2 or n % 2 or (divide and max(sizes) % n) for n in sizes):
            raise ConfigError(f"{name}: >= 2 even sizes{' that must divide max' * divide}")


def require(config, *, positive=(), at_least=None) -> None:
    """One ``ConfigError`` naming every field that is not positive or below its minimum
    (``at_least={2: ("n", "saves")}``)."""
    bad = [f"{k} > 0" for k in positive if not getattr(config, k) > 0]
    bad += [
        f"{k} >= {m}" for m, ks in (at_least or {}).items() for k in ks if getattr(config, k) < m
    ]
    if bad:
        raise ConfigError(
            f"need {', '.join(bad)}; got {[getattr(config, b.split()[0]) for b in bad]}"
        )


def record(run, checks: dict) -> None:
    """``run.evidence(name, evidence, note=note)`` for each ``name: (evidence, note)``."""
    for name, (evidence, note) in checks.items():
        run.evidence(name, evidence, note=note)
