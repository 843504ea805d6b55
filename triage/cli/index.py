"""`triage index build`: rebuild the nearest-neighbour index in models/."""

from __future__ import annotations

import click


@click.group("index")
def index() -> None:
    """The nearest-neighbour index in models/."""


@index.command("build")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Where to write the index (default: models/).",
)
def index_build(out_dir: str | None) -> None:
    """Rebuild the nearest-neighbour index from the reference cases."""
    from importlib.util import find_spec

    from triage.train import indexing

    if find_spec("sklearn") is None:  # it fits the TF-IDF space; the default install lacks it
        raise click.ClickException("building the index needs `pip install 'triage[build]'`")
    path = indexing.build_index(out_dir=out_dir)
    click.echo(f"index written to {path}")
