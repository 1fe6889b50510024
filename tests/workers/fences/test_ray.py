"""The Ray fence: the private call it makes still exists in the installed Ray and answers as read,
on a live cluster (none of its nodes draining), and another Ray release series is refused."""

import pytest

from workers.fences import ray as fenced_ray
from workers.fences.releases import check_series


def test_a_cluster_with_no_node_draining_lists_none(ray_session):
    assert fenced_ray.draining_nodes() == {}


def test_another_ray_series_is_refused_naming_the_fence():
    with pytest.raises(
        RuntimeError, match=r"ray 2\.61\.0 is installed, but workers/fences/ray\.py uses private code of ray 2\.60\.x"
    ):
        check_series("ray", "2.61.0", "2.60", "2.61", "ray/_private/state.py")
