"""The --cluster / --generators options, shared by replay, sweep, predict and validate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from shrink.replay.cluster import ClusterSpec

__all__ = ["ClusterOpt", "GeneratorsOpt", "cluster_spec"]

ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        # The package's name first: a wrap at its hyphen split it where it was last.
        help="Needs pip install 'shrink-capacity[ray]'. Run the load generators on a Ray "
        "cluster: ray:ADDRESS as ray.init takes it (ray:auto: the running cluster, refused "
        "as root; ray:local: a private one started here; ray://HOST:PORT: Ray Client).",
    ),
]
GeneratorsOpt = Annotated[
    int | None,
    typer.Option(
        "--generators",
        help="Generator slots on the cluster (default 2); ignored without --cluster.",
    ),
]


def cluster_spec(cluster: str | None, generators: int | None) -> ClusterSpec | None:
    """The cluster to run on, or None (``--generators`` alone is ignored, as documented)."""
    from shrink.replay.cluster import parse_cluster

    return parse_cluster(cluster, generators)
