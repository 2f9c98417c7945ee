"""Corruption operators on real files."""

from __future__ import annotations

import os

import pytest

from ckpt_harness.inject.corrupt import (
    CORRUPTIONS,
    DEFAULT_CORRUPTIONS,
    bit_flip,
    committed_files,
    delete,
    truncate,
    zero_page,
)


def pattern(n: int) -> bytes:
    """Bytes with no zero among them, so any zeroing shows."""
    return bytes(1 + i % 251 for i in range(n))


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(pattern(10_000))
    return path


def differing_bits(a: bytes, b: bytes) -> list[tuple[int, int]]:
    return [(i, bit) for i, (x, y) in enumerate(zip(a, b)) for bit in range(8) if (x ^ y) >> bit & 1]


def test_bit_flip_changes_exactly_one_bit_in_the_middle(shard):
    before = shard.read_bytes()
    desc = bit_flip(shard)
    after = shard.read_bytes()
    assert len(after) == len(before)
    assert differing_bits(before, after) == [(5000, 0)]
    assert "bit 0 of byte 5000" in desc


def test_bit_flip_is_deterministic_per_seed(tmp_path):
    flips = {}
    for seed in (1, 1, 2, 3):
        path = tmp_path / f"f{seed}"
        path.write_bytes(pattern(1000))
        bit_flip(path, seed=seed)
        (flip,) = differing_bits(pattern(1000), path.read_bytes())
        assert flips.setdefault(seed, flip) == flip
    assert len(set(flips.values())) == 3


def test_bit_flip_twice_restores_the_file(shard):
    before = shard.read_bytes()
    bit_flip(shard, seed=7)
    bit_flip(shard, seed=7)
    assert shard.read_bytes() == before


def test_zero_page_zeroes_the_page_holding_the_middle(shard):
    desc = zero_page(shard)  # middle byte 5000 is in page 1: bytes 4096..8192
    after = shard.read_bytes()
    assert after[:4096] == pattern(10_000)[:4096]
    assert after[4096:8192] == bytes(4096)
    assert after[8192:] == pattern(10_000)[8192:]
    assert "4096..8192" in desc


def test_zero_page_is_clipped_to_the_file(tmp_path):
    small = tmp_path / "small"
    small.write_bytes(pattern(100))
    zero_page(small)
    assert small.read_bytes() == bytes(100)
    tail = tmp_path / "tail"
    tail.write_bytes(pattern(5000))  # middle 2500 is in page 0
    zero_page(tail, page=2048)  # middle 2500 is in page 1: 2048..4096
    assert tail.read_bytes() == pattern(5000)[:2048] + bytes(2048) + pattern(5000)[4096:]


def test_zero_page_refuses_a_page_that_is_already_zero(tmp_path):
    path = tmp_path / "zeros"
    path.write_bytes(b"x" + bytes(8191))
    with pytest.raises(ValueError, match="already zero"):
        zero_page(path)


def test_truncate_keeps_the_first_half(shard):
    desc = truncate(shard)
    assert shard.read_bytes() == pattern(10_000)[:5000]
    assert desc == "truncated from 10000 to 5000 bytes"


def test_truncate_one_byte_file(tmp_path):
    path = tmp_path / "one"
    path.write_bytes(b"x")
    truncate(path)
    assert path.read_bytes() == b""


def test_delete(shard):
    assert "10000 bytes" in delete(shard)
    assert not shard.exists()


@pytest.mark.parametrize("name", ["bit-flip", "zero-page", "truncate"])
def test_empty_files_are_refused(tmp_path, name):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        CORRUPTIONS[name](path, tmp_path / "canary")


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_every_operator_changes_the_file_in_place_and_is_deterministic(tmp_path, name):
    results = []
    for i in range(2):
        path = tmp_path / f"{i}.bin"
        path.write_bytes(pattern(3000))
        inode = os.stat(path).st_ino
        desc = CORRUPTIONS[name](path, tmp_path / "canary")
        assert isinstance(desc, str) and desc
        if path.exists():
            assert path.read_bytes() != pattern(3000)
            assert os.stat(path).st_ino == inode
        results.append((desc, path.read_bytes() if path.exists() else None))
    assert results[0] == results[1]


def test_registry_names():
    assert set(CORRUPTIONS) == {"bit-flip", "zero-page", "truncate", "delete", "unsafe-pickle"}
    assert set(DEFAULT_CORRUPTIONS) == set(CORRUPTIONS) - {"unsafe-pickle"}


def test_committed_files_lists_regular_files_sorted(tmp_path):
    (tmp_path / "step_2" / "shards").mkdir(parents=True)
    (tmp_path / "step_10").mkdir()
    (tmp_path / "empty_dir").mkdir()
    for rel in ("latest", "step_2/shards/1.pt", "step_2/shards/0.pt", "step_10/model.pt", "step_2/.metadata"):
        (tmp_path / rel).write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "latest")
    (tmp_path / "dirlink").symlink_to(tmp_path / "step_2", target_is_directory=True)
    assert committed_files(tmp_path) == [
        "latest", "step_10/model.pt", "step_2/.metadata", "step_2/shards/0.pt", "step_2/shards/1.pt",
    ]
