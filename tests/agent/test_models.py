"""Model-name normalisation: driver names become Rota's GPU-model slugs."""

import pytest

from scheduler.agent.gpu.models import family_of, mig_profile_of, model_slug, nominal_memory_gb


@pytest.mark.parametrize(
    ("name", "memory_mb", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "h100-80gb"),
        ("NVIDIA A100-SXM4-40GB", 40960, "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", 81920, "a100-80gb"),
        ("NVIDIA L40S", 46068, "l40s-48gb"),
        ("NVIDIA H200", 143771, "h200-141gb"),
        ("NVIDIA H100 NVL", 95830, "h100-94gb"),
        ("Tesla V100-SXM2-32GB", 32510, "v100-32gb"),
        ("NVIDIA A10G", 23028, "a10g-24gb"),
        ("NVIDIA GeForce RTX 4090", 24564, "rtx4090-24gb"),
    ],
)
def test_it_turns_driver_names_into_model_slugs(name: str, memory_mb: int, slug: str) -> None:
    assert model_slug(name, memory_mb) == slug


def test_it_names_a_mig_slice_after_its_parent_family_and_profile() -> None:
    name = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    assert model_slug(name, 9856, parent_name="NVIDIA A100-SXM4-80GB") == "a100-1g.10gb"
    assert model_slug("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968) == "a100-3g.20gb"


def test_it_reads_the_mig_profile_from_a_device_name() -> None:
    assert mig_profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert mig_profile_of("NVIDIA H100 80GB HBM3") is None


def test_it_rounds_reported_memory_to_the_marketed_size() -> None:
    assert nominal_memory_gb(81559) == 80
    assert nominal_memory_gb(46068) == 48
    assert nominal_memory_gb(40960) == 40


def test_it_falls_back_to_a_slug_of_the_name_without_a_product_number() -> None:
    assert family_of("Mystery Accelerator") == "mystery-accelerator"
