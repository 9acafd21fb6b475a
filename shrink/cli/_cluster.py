"""The --cluster / --generators options, shared by replay, sweep, predict and validate."""

from __future__ import annotations

from typing import Annotated

import typer

from shrink.replay.cluster import ClusterSpec, parse_cluster

__all__ = ["ClusterOpt", "GeneratorsOpt", "cluster_spec"]

ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Run the load generators on a Ray cluster: ray:ADDRESS as ray.init takes it "
        "(ray:auto: the running cluster). Needs pip install 'shrink\\[ray]'.",
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
    return parse_cluster(cluster, generators)
