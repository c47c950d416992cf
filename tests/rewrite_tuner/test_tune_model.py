"""`tune_model`: a user's own model (a file and a factory) tuned in a few trials, starting from a
priors file, validated against the defaults and those priors, exported only when it beats both.
Real searches on a tiny model at small budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewrite.optimize import PriorsFile, default_rules, read_priors_file
from rewrite_tuner.knobs import config_from_params
from rewrite_tuner.tune_model import tune_model
from rewrite_tuner.user_model import model_ref, user_graph
from studies import StudyError

MODEL = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny_lm.py")


def test_a_model_reference_names_a_file_a_factory_and_inputs() -> None:
    ref = model_ref(f"{MODEL}:build", ["int64[2,16]"])
    assert ref.name == "tiny_lm:build" and ref.inputs == (("int64", (2, 16)),)
    assert model_ref(str(ref)) == ref  # the canonical string parses back
    g = user_graph(str(ref))
    assert g.name == "tiny_lm:build" and len(g) > 10


@pytest.mark.parametrize(
    ("target", "inputs", "match"),
    [
        ("nope.py:build", ["int64[1,8]"], "does not exist"),
        (f"{MODEL}", ["int64[1,8]"], "is not of the form"),
        (f"{MODEL}:build", ["int8[1,8]"], "dtype among"),
        (f"{MODEL}:build", [], "no example inputs"),
        (f"{MODEL}:build(int64[1,8])", ["int64[1,8]"], "give them once"),
        (f"{MODEL}:missing", ["int64[1,8]"], r"has no 'missing'; it defines \[.*'build'"),
        (f"{MODEL}:not_a_model", ["int64[1,8]"], "is a int, not a module or factory"),
        (f"{MODEL}:TinyLM", ["float32[1,8]"], "does not run on the example inputs.*float32"),
        # issue 52: a model that cannot run on the input was calibrated, tuned and validated
        (f"{MODEL}:Linear", ["int64[2,16,64]"], r"int64\[2, 16, 64\].*cast the inputs"),
        # issue 52: a meta-device model read as "a construct torch.export cannot capture"
        (f"{MODEL}:on_meta", ["int64[1,8]"], "'meta' device.*load its weights"),
        # issue 52: the message quoted 'int64(1', a fragment the user never typed
        (
            f"{MODEL}:build",
            ["int64(1,8)"],
            r"Input 'int64\(1,8\)'.*square brackets: 'int64\[1,8\]'",
        ),
        (f"{MODEL}:build", ["use_cache=maybe"], "neither a tensor"),
        (f"{MODEL}:build", ["int64[1,8]", "x=False", "int64[1,8]"], "comes after keyword"),
    ],
)
def test_bad_model_references_are_clear_errors(target: str, inputs: list, match: str) -> None:
    with pytest.raises(StudyError, match=match):
        user_graph(str(model_ref(target, inputs)))


def test_keyword_inputs_reach_the_model() -> None:
    """Issue 52: tune-model took no keyword inputs, so every Hugging Face model with a default
    config failed until its config was edited; keyword inputs parse, print back and reach the
    model, and use_cache=False is the default for a model that takes it."""
    ref = model_ref(f"{MODEL}:with_options", ["int64[1,8]", "scale=2.0", "mask=float32[1,8]"])
    assert ref.kwargs == (("scale", 2.0), ("mask", ("float32", (1, 8))))
    assert model_ref(str(ref)) == ref and "scale=2.0, mask=float32[1,8]" in str(ref)
    g = user_graph(str(ref))
    assert len(g.inputs) == 2  # ids and the mask; scale is a constant of the call
    plain = user_graph(str(model_ref(f"{MODEL}:with_options", ["int64[1,8]"])))
    assert len(plain.inputs) == 1


def test_a_priors_file_with_a_bad_knob_is_refused_before_calibrating(tmp_path: Path) -> None:
    """Issue 52: --from FILE with search_config.tau = -1 ran with another tau and recommended
    the file, which rewrite.search refuses; a binary file gave a raw UnicodeDecodeError."""
    bad = tmp_path / "bad.json"
    PriorsFile({}, {"tau": -1.0}).save(bad)
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    for path, match in ((bad, r"bad.json.*tau=-1"), (binary, "model.bin.*not a text file")):
        with pytest.raises(StudyError, match=match):
            tune_model(
                f"{MODEL}:build",
                ["int64[1,8]"],
                priors=path,
                trials=2,
                storage=f"sqlite:///{tmp_path / 's.db'}",
            )
    assert not (tmp_path / "s.db").exists()


def test_tune_model_starts_from_the_given_priors_and_checks_against_them(tmp_path: Path) -> None:
    names = [r.name for r in default_rules()]
    boosted = {n: (5.0 if n.startswith("fuse_") else 1.0) for n in names}
    total = sum(boosted.values())
    given = PriorsFile({n: v / total for n, v in boosted.items()}, {"beta": 0.6})
    given.save(tmp_path / "given.json")
    lines: list[str] = []
    result = tune_model(
        f"{MODEL}:build",
        ["int64[1,16]"],
        priors=tmp_path / "given.json",
        trials=3,
        budget=20,
        seeds=2,
        calibration_seeds=2,
        n_workers=1,
        storage=f"sqlite:///{tmp_path / 's.db'}",
        out=tmp_path / "tuned.json",
        validation_seeds=(100, 101),
        on_progress=lines.append,
    )
    from studies import Study

    study = Study.load(result.study, f"sqlite:///{tmp_path / 's.db'}")
    trials = study.trials
    assert [t.state for t in trials] == ["COMPLETE"] * 3
    # trial 0: the defaults; trial 1: the given priors (the family's centre), the file's knob
    assert trials[0].config == study.space.default()
    centre = trials[1].config
    assert centre["prior_weight"] == 1.0 and centre["beta"] == 0.6
    cfg, priors = config_from_params(centre)
    assert priors is not None
    # the given priors over the rules a one-device mesh can use (no sharding), renormalized
    kept = sum(given.priors[r] for r in priors)
    assert priors == pytest.approx({r: given.priors[r] / kept for r in priors}, abs=1e-12)
    assert cfg.max_steps == 20 and study.context["spec"]["workloads"] == [result.model]  # type: ignore[index]
    if result.validation.shown == 1:  # the given priors ranked first: nothing to compare
        assert result.against_given is None
    else:
        assert result.against_given is not None and result.against_given.seeds == (100, 101)
    assert set(result.seconds) == {"calibration", "tuning", "validation"}
    assert any(line.startswith("calibrating the default search on tiny_lm:build") for line in lines)
    if result.exported is not None:  # it beat the defaults and the given priors
        doc = read_priors_file(tmp_path / "tuned.json")
        assert doc.provenance["model"] == result.model
        assert doc.provenance["against_given_priors"]["file"].endswith("given.json")
        assert "wrote" in result.verdict
    else:
        assert not (tmp_path / "tuned.json").exists() and "nothing exported" in result.verdict


def test_the_tune_model_command_prints_the_comparisons_and_the_verdict(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rewrite_tuner.cli import app

    url = f"sqlite:///{tmp_path / 's.db'}"
    base = ["tune-model", f"{MODEL}:build", "--inputs", "int64[1,16]", "--storage", url]
    small = ["--trials", "2", "--steps", "20", "--seeds", "1", "-w", "1"]
    out = tmp_path / "p.json"
    result = CliRunner().invoke(app, [*base, *small, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "calibrating the default search on tiny_lm:build" in result.output
    assert "against the defaults on 6 fresh" in result.output
    assert ("wrote" in result.output) == out.exists()
    missing = CliRunner().invoke(app, ["tune-model", "nope.py:build", "--inputs", "int64[1,8]"])
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_tune_model_warm_starts_from_a_finished_study(tmp_path: Path) -> None:
    from studies import Study

    source = f"sqlite:///{tmp_path / 'source.db'}"
    small = {"budget": 20, "seeds": 1, "calibration_seeds": 2, "n_workers": 1}
    small |= {"validation_seeds": (100, 101)}
    first = tune_model(f"{MODEL}:build", ["int64[1,16]"], trials=3, storage=source,
                       out=tmp_path / "a.json", **small)  # fmt: skip
    done = Study.load(first.study, source)
    lines: list[str] = []
    url = f"sqlite:///{tmp_path / 'warm.db'}"
    tune_model(f"{MODEL}:build", ["int64[1,16]"], trials=3, storage=url,
               warm_start=[{"study": first.study, "storage": source}], out=tmp_path / "b.json",
               on_progress=lines.append, **small)  # fmt: skip
    warm = Study.load(first.study, url)
    assert warm.settings.warm_start == [{"study": first.study, "storage": source}]
    (said,) = [line for line in lines if line.startswith("warm start: ")]
    n = int(said.split()[2])
    # after the lead design (the defaults, the informed prior), the source's best trials (its
    # Pareto front, best first, two at most) that the lead does not hold
    from studies.pareto import rank_pareto

    lead = [t.config for t in warm.trials[:2]]
    assert lead == [t.config for t in done.trials[:2]]
    best = [t.config for t in rank_pareto(done.trials, done.objectives, done.constraints)][:2]
    expected = [c for c in best if c not in lead]
    assert n == len(expected)
    assert [t.config for t in warm.trials[2 : 2 + n]] == expected


def test_the_command_shows_the_input_form_it_asks_for() -> None:
    """Issue 52: Rich markup swallowed '[d0,d1,...]' in the error line."""
    from typer.testing import CliRunner

    from rewrite_tuner.cli import app

    result = CliRunner().invoke(app, ["tune-model", f"{MODEL}:build", "--inputs", "int64(1,8)"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and "'dtype[d0,d1,...]'" in text and "'int64[1,8]'" in text
