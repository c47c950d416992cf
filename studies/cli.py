"""The `tuner` command line.

Heavy modules (torch, botorch, the rewrite engine) are imported inside commands, so
``tuner --help`` and ``tuner --version`` stay fast.
"""

from __future__ import annotations

import logging

import typer

from studies import __version__

app = typer.Typer(
    name="tuner",
    help="Tune tensor-graph rewrite search with structured multi-objective Bayesian optimization.",
    no_args_is_help=True,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"rewrite-tuner {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level."),
) -> None:
    """Tune tensor-graph rewrite search with structured multi-objective Bayesian optimization."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@app.command()
def demo(
    n: int = typer.Option(8, help="Number of configurations to sample."),
    seed: int = typer.Option(0, help="Sobol scrambling seed."),
) -> None:
    """Build a search space with a rule-prior simplex; sample, encode and decode it."""
    from rich.console import Console
    from rich.table import Table

    from spaces import Bool, Choice, Float, Int, Simplex, Space

    space = Space(
        {
            "population": Int(8, 256, log=True, default=32),
            "tau": Float(0.01, 10.0, log=True),
            "mutations": Int(1, 8),
            "selection": Choice(["softmax", "tournament"]),
            "restart": Bool(),
            "priors": Simplex(["fuse", "merge", "shard", "algebra"]),
        }
    )
    configs = space.sample(n, seed=seed)
    X = space.to_unit(configs)
    decoded = space.from_unit(X)
    console = Console()
    table = Table(title=f"{n} Sobol configurations (seed {seed}), d = {space.dim} GP columns")
    for name in space.names:
        table.add_column(name, justify="right")
    table.add_column("round trip", justify="center")
    for config, back in zip(configs, decoded):
        cells = []
        for name in space.names:
            v = config[name]
            if isinstance(v, dict):
                cells.append(" ".join(f"{k}={w:.2f}" for k, w in v.items()))
            elif isinstance(v, float):
                cells.append(f"{v:.4g}")
            else:
                cells.append(str(v))
        same = space.to_unit([back]).allclose(space.to_unit([config]), atol=1e-12)
        cells.append("ok" if same else "MISMATCH")
        table.add_row(*cells)
    console.print(table)
    console.print(f"columns: {space.columns}")
    console.print(f"simplex constraint: columns {space.simplex_dims['priors']} sum to 1")
