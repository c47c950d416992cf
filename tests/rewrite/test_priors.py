"""RulePriors (weights only): normalization, missing-rule default; PriorsFile (the priors file):
versioned JSON round trip, bad files, golden files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rewrite.errors import PriorsError
from rewrite.optimize.priors import FORMAT_VERSION, KIND, PriorsFile, RulePriors, read_priors_file

RULES = ["fuse", "merge", "shard"]


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def test_uniform_default_and_normalization() -> None:
    p = RulePriors().resolve(RULES)
    assert np.allclose(p, 1 / 3) and p.sum() == pytest.approx(1.0)
    q = RulePriors({"fuse": 2.0, "merge": 1.0, "shard": 1.0})
    assert q["fuse"] == pytest.approx(0.5)
    assert q.resolve(RULES).sum() == pytest.approx(1.0)
    assert RulePriors.uniform(RULES).resolve(RULES) == pytest.approx(p)


def test_missing_rule_gets_uniform_share_then_renormalized() -> None:
    p = RulePriors({"fuse": 0.5, "merge": 0.5}).resolve(RULES)
    # shard gets 1/3 before renormalizing: (0.5, 0.5, 1/3) / (4/3)
    assert p == pytest.approx(np.array([0.375, 0.375, 0.25]))


def test_unknown_rule_is_an_error() -> None:
    with pytest.raises(PriorsError, match="unknown rules \\['nope'\\]"):
        RulePriors({"nope": 1.0, "fuse": 1.0}).resolve(RULES)


@pytest.mark.parametrize(
    "weights", [{"a": -1.0}, {"a": float("nan")}, {"a": 0.0, "b": 0.0}, {"": 1.0}, {"a": "x"}]
)
def test_bad_weights(weights: dict) -> None:
    with pytest.raises(PriorsError):
        RulePriors(weights)


def test_round_trip(tmp_path: Path) -> None:
    p = PriorsFile({"fuse": 0.2, "merge": 0.3, "shard": 0.5}, {"tau": 0.5}, {"trial": 3})
    path = p.save(tmp_path / "p.json")
    q = PriorsFile.load(path, known_rules=RULES)
    assert q == p and q.search_config == {"tau": 0.5}
    assert json.loads(path.read_text())["format_version"] == FORMAT_VERSION


def test_empty_priors_round_trip_as_uniform(tmp_path: Path) -> None:
    """Issue 52: ``RulePriors().save(p)`` wrote ``"priors": {}``, which its own reader refused.
    Empty priors mean uniform over the search's rules, in a file as in memory."""
    for p in (PriorsFile.of(RulePriors()), PriorsFile({}, {"tau": 0.5})):
        q = PriorsFile.load(p.save(tmp_path / "empty.json"), known_rules=RULES)
        assert q == p and q.search_config == p.search_config
        weights = RulePriors(q.priors).resolve(RULES)
        assert list(weights) == pytest.approx([1 / len(RULES)] * len(RULES))


def test_a_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(PriorsError, match="not a text file"):
        PriorsFile.load(path)


def test_loads_studies_export_format(tmp_path: Path) -> None:
    doc = {
        "format_version": 1,
        "kind": "rewrite-tuner/rule-priors",
        "priors": {"fuse": 0.5, "merge": 0.3, "shard": 0.2},
        "search_config": {"population": 32, "tau": 0.5},
        "provenance": {"study": "s", "trial": 7, "values": {"hv": 0.4}, "date": "2026-01-01Z"},
    }
    q = PriorsFile.load(_write(tmp_path / "x.json", doc), known_rules=RULES)
    assert q.priors["merge"] == pytest.approx(0.3)
    assert q.search_config["population"] == 32 and q.provenance["trial"] == 7


def _doc(**changes: object) -> dict:
    doc = {"format_version": 1, "kind": KIND, "priors": {"fuse": 0.5, "merge": 0.5}}
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        (_doc(format_version=2), "newer|Upgrade"),
        (_doc(format_version="1"), "format_version"),
        (_doc(kind="other"), "kind"),
        (_doc(priors={"fuse": 0.7, "merge": 0.7}), "sum to 1"),
        (_doc(priors=[]), "object"),
        (_doc(priors={"fuse": -0.5, "merge": 1.5}), ">= 0"),
        (_doc(priors={"fuse": 0.5, "bogus": 0.5}), "unknown rules"),
        (_doc(search_config=[1]), "JSON object"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_files(tmp_path: Path, doc: object, match: str) -> None:
    with pytest.raises(PriorsError, match=match):
        PriorsFile.load(_write(tmp_path / "bad.json", doc), known_rules=RULES)


def test_non_finite_and_corrupt_files(tmp_path: Path) -> None:
    head = '{"format_version": 1, "kind": "' + KIND + '", '
    text = head + '"priors": {"fuse": NaN, "merge": 1}}'
    with pytest.raises(PriorsError, match="NaN"):
        read_priors_file(_write(tmp_path / "nan.json", text))
    text = head + '"priors": {"fuse": 1}, "search_config": {"tau": Infinity}}'
    with pytest.raises(PriorsError, match="Infinity"):
        read_priors_file(_write(tmp_path / "inf.json", text))
    with pytest.raises(PriorsError, match="not a valid"):
        read_priors_file(_write(tmp_path / "torn.json", '{"format_version": 1, "kin'))
    with pytest.raises(PriorsError, match="Cannot read"):
        read_priors_file(tmp_path / "missing.json")


DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("name", "priors", "search_config", "trial"),
    [
        (  # written by RulePriors.save (before priors were weights only)
            "rule_priors_v1.json",
            {
                "fuse_elementwise": 0.4,
                "merge_parallel_linear": 0.25,
                "matmul_assoc_left_to_right": 0.2,
                "chunk_linear": 0.15,
            },
            {"population": 32, "tau": 0.5, "m": 2},
            7,
        ),
        (  # written by `tuner export` (rewrite_tuner.export_priors)
            "studies_export_priors_v1.json",
            {"fuse": 0.4, "merge": 0.3, "shard": 0.2, "reorder": 0.1},
            {"population": 32, "tau": 0.5},
            7,
        ),
    ],
)
def test_golden_v1_files_still_load(
    name: str, priors: dict, search_config: dict, trial: int
) -> None:
    """The format's one golden-file test: every v1 file still reads, through the one reader
    (`read_priors_file`), and a search given its path runs with its knobs and its weights."""
    from rewrite.optimize.api import search_inputs
    from rewrite.optimize.config import SearchConfig

    path = DATA / name
    doc = read_priors_file(path)
    assert doc.format_version == 1 and doc.priors == priors
    assert search_config.items() <= doc.search_config.items()
    assert doc.provenance["trial"] == trial and doc.provenance["study"] == "golden"
    assert read_priors_file(path, known_rules=list(priors)) == doc
    assert PriorsFile.load(path) == doc and PriorsFile.of(path) == doc
    cfg, p = search_inputs(None, path)
    assert cfg == SearchConfig.from_dict(doc.search_config) and cfg.tau == 0.5
    assert cfg.population == 32 and p == RulePriors(priors)
    assert search_inputs(None, doc) == (cfg, p)  # the document and its file: one search
    assert search_inputs({"seed": 4}, path) == (cfg.replace(seed=4), p)
    with pytest.raises(PriorsError, match="unknown rules"):
        read_priors_file(path, known_rules=list(priors)[:1])


def test_coerce() -> None:
    assert RulePriors.coerce(None) == RulePriors()
    assert RulePriors.coerce({"a": 1.0})["a"] == 1.0
    with pytest.raises(PriorsError, match="must be a RulePriors"):
        RulePriors.coerce(3)  # type: ignore[arg-type]
    # weights only: a file carries knobs too, so it is the search's (or a PriorsFile's) to read
    with pytest.raises(PriorsError, match="carries search knobs.*read_priors_file"):
        RulePriors.coerce("p.json")  # type: ignore[arg-type]
    assert not hasattr(RulePriors(), "search_config") and not hasattr(RulePriors, "load")
