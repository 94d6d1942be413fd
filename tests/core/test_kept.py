"""KeptForNext: a value derived from static parts is rebuilt only when the parts change."""

from scheduler.core.kept import KeptForNext


def test_it_rebuilds_only_when_the_parts_change():
    kept: KeptForNext[list] = KeptForNext()
    builds = []

    def build(tag):
        builds.append(tag)
        return [tag]

    nodes = ("n1", "n2")
    first = kept.get((nodes, ()), lambda: build(1))
    assert kept.get((nodes, ()), lambda: build(2)) is first  # the same tuples
    assert kept.get((("n1", "n2"), ()), lambda: build(3)) is first  # equal tuples (a rebuilt snapshot)
    assert kept.get((("n1",), ()), lambda: build(4)) == [4]  # other parts replace the entry
    assert kept.get((nodes, ()), lambda: build(5)) == [5]
    assert builds == [1, 4, 5]
