"""Log chunks: byte offsets that match what the portal stores, whole UTF-8 characters only."""

from pathlib import Path

from scheduler.agent.logship import read_chunk, ship_log


class Recorder:
    """Collects log posts like the portal's log endpoint."""

    def __init__(self) -> None:
        self.chunks: list[dict] = []

    def job_log(self, job_id: int, body: dict) -> None:
        self.chunks.append(body)


def test_it_never_splits_a_utf8_character_until_the_log_is_final(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes("ok é".encode()[:-1])  # the writer is in the middle of "é"
    assert read_chunk(str(path), 0) == ("ok ", 3)
    assert read_chunk(str(path), 0, final=True) == ("ok ?", 4)


def test_each_invalid_byte_becomes_one_character_so_offsets_stay_exact(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\xff\xfeb")
    text, size = read_chunk(str(path), 0)
    assert (text, size) == ("a??b", 4) and len(text.encode()) == size


def test_it_ships_new_bytes_from_the_acknowledged_offset_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"x" * 150_000)
    portal, progress = Recorder(), []
    offset = ship_log(portal, 7, 2, str(path), 10, progress=progress.append)
    assert offset == 150_000
    assert [c["offset"] for c in portal.chunks] == [10, 10 + 65536, 10 + 2 * 65536]
    assert progress == [10 + 65536, 10 + 2 * 65536, 150_000]
    assert {c["attempt"] for c in portal.chunks} == {2}
    assert ship_log(portal, 7, 2, str(path), offset) == offset and len(portal.chunks) == 3
