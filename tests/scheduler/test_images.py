"""scheduler.images: what an image reference is and which allow-list entries admit it."""

import pytest

from scheduler.images import ImageError, image_allowed, image_parse, image_resolve, pattern_check, pools_allowing


def test_it_reads_registry_repository_tag_and_digest():
    ref = image_parse("Registry.Example.com:5000/team/train:1.2")
    assert (ref.registry, ref.path, ref.tag) == ("registry.example.com:5000", "team/train", "1.2")
    assert str(image_parse("localhost/rota/python")) == "localhost/rota/python:latest"
    digest = "sha256:" + "a" * 64
    assert image_parse(f"localhost/rota/python@{digest}").digest == digest


@pytest.mark.parametrize("bad", ["python:3.11", "ubuntu", "library/ubuntu:22.04", "localhost/Rota/x", "a b",
                                 "localhost/rota/x:", "", "localhost/" + "x" * 300])
def test_it_refuses_what_is_not_a_full_reference_and_says_how(bad):
    with pytest.raises(ImageError) as refused:
        image_parse(bad)
    assert "localhost/rota/python:3.11" in str(refused.value) or "at most 300" in str(refused.value)


@pytest.mark.parametrize(("pattern", "image", "allowed"), [
    ("registry.example.com/", "registry.example.com/team/train:1", True),
    ("registry.example.com/", "registry.example.com:5000/team/train:1", False),
    ("registry.example.com/", "registry.example.com.evil.io/x:1", False),
    ("registry.example.com/team/", "registry.example.com/teamx/train:1", False),
    ("localhost/rota/*", "localhost/rota/python:3.11", True),
    ("localhost/rota/*", "localhost/other/python:3.11", False),
    ("localhost/rota/python", "localhost/rota/python:3.12", True),
    ("localhost/rota/python", "localhost/rota/python-gpu:1", False),
    ("localhost/rota/python:3.11", "localhost/rota/python:3.12", False),
    ("localhost/rota/python:3.11", "localhost/rota/python:3.11", True),
])
def test_each_form_of_allow_list_entry_admits_what_it_says(pattern, image, allowed):
    assert image_allowed(image_parse(image), [pattern_check(pattern)]) is allowed


def test_an_empty_allow_list_admits_nothing_and_pools_are_named_by_their_lists():
    ref = image_parse("localhost/rota/python:3.11")
    assert not image_allowed(ref, [])
    assert pools_allowing(ref, {"a": ["localhost/"], "b": [], "c": ["registry.example.com/"]}) == {"a"}


def test_an_allow_list_entry_must_name_a_registry_path():
    for bad in ["", "*", "registry.example.com", "local host/x", "x" * 301]:
        with pytest.raises(ImageError):
            pattern_check(bad)
    assert pattern_check(" Registry.Example.com/Team/ ") == "registry.example.com/Team/"


def test_a_job_runs_in_its_own_image_else_its_kinds_default_else_the_sites():
    defaults = {"evaluation": "localhost/rota/eval:1"}
    assert image_resolve("localhost/a/b:1", "evaluation", defaults, "localhost/rota/python:3.11") == "localhost/a/b:1"
    assert image_resolve(" ", "evaluation", defaults, "localhost/rota/python:3.11") == "localhost/rota/eval:1"
    assert image_resolve("", "training", defaults, "localhost/rota/python:3.11") == "localhost/rota/python:3.11"
