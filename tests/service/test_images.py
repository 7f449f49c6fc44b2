"""The image of a run's environment: named by its content, its build context written once."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.backends.base import ClusterConfig
from runs.planning import images

CLUSTER = ClusterConfig(registry="registry.lab.example/simrun", harness_image="harness:0.1.0")


def test_the_image_of_an_environment_is_named_by_its_content_whatever_the_order():
    one = images.resolve({"packages": ["numpy", "scipy>=1.11"]}, CLUSTER)
    two = images.resolve({"packages": ["scipy>=1.11", "numpy", "numpy"]}, CLUSTER)
    assert one == two
    assert one.image == f"registry.lab.example/simrun/simrun-env:{one.digest[:32]}"
    assert images.resolve({"packages": ["numpy"]}, CLUSTER).image != one.image
    other_base = images.resolve({"image": "lab:2", "packages": ["numpy", "scipy>=1.11"]}, CLUSTER)
    assert other_base.image != one.image and other_base.base == "lab:2"


def test_an_environment_without_packages_is_its_base_image():
    assert images.resolve({}, CLUSTER) == images.Environment(
        "harness:0.1.0", None, "harness:0.1.0", ()
    )
    assert images.resolve({"image": "lab:2"}, CLUSTER).image == "lab:2"
    assert images.resolve({"packages": ["numpy"]}, ClusterConfig()).image.startswith("simrun-env:")


def test_the_build_context_is_the_base_image_and_a_pip_install_of_the_packages(store: Path):
    environment = images.resolve({"packages": ["scipy>=1.11", "numpy"]}, CLUSTER)
    context = images.write_context(environment)
    assert context == store / "images" / environment.digest
    dockerfile = (context / "Dockerfile").read_text()
    assert "FROM harness:0.1.0\n" in dockerfile
    assert "pip install --no-cache-dir -r /tmp/simrun-requirements.txt" in dockerfile
    assert (context / "requirements.txt").read_text() == "numpy\nscipy>=1.11\n"
    (context / "Dockerfile").write_text("kept")
    assert images.write_context(environment) == context
    assert (context / "Dockerfile").read_text() == "kept", "written once"
    assert [p.name for p in (store / "images").iterdir()] == [environment.digest]


def test_an_environment_without_packages_has_no_build_context():
    with pytest.raises(ValueError, match="needs no build"):
        images.write_context(images.resolve({}, CLUSTER))
