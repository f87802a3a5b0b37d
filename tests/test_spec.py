"""JobSpec: loading YAML, merging CLI flags, and one field-named SpecError for any bad input."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ferry.accelerators import parse_accelerator
from ferry.errors import SpecError, UsageError
from ferry.spec import JobSpec, load_spec, merge, read_spec_file, spec_from_dict

# The job spec of docs/spec.md, every field.
FULL_SPEC = """\
name: digits-cnn
code: .
command: python train.py --epochs 20
environment: {requirements: requirements.txt}
resources: {accelerator: "A100:1", cpus: 8, memory: 32GB, spot: true, nodes: 1}
inputs:  {train: gs://data-bucket/data, labels: ./labels.csv}
outputs: gs://data-bucket/runs/{job_id}
hyperparameters: {lr: 0.001, batch_size: 64}
env: {WANDB_MODE: offline}
secrets: [HF_TOKEN]
limits: {max_runtime: 6h, max_cost: 20}
retries: {on_preemption: 20, on_error: 1}
checkpoint: {every: 10m}
backend: local
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def spec_error(data: object) -> str:
    """The message of the SpecError that ``data`` must raise."""
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    return str(info.value)


def file_error(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return str(info.value)


# ---------------------------------------------------------------------------------------
# Valid specs


def test_full_spec_from_design_md(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "job.yaml", FULL_SPEC))
    assert spec.name == "digits-cnn"
    assert spec.code == str(tmp_path)
    assert spec.command == ("python", "train.py", "--epochs", "20")
    assert spec.shell is False
    assert spec.environment.requirements == "requirements.txt"
    assert spec.environment.kind == "requirements"
    res = spec.resources
    assert res.accelerator == "A100:1"
    assert res.accelerator_request == parse_accelerator("A100:1")
    assert res.gpu_count == 1
    assert res.cpus == 8
    assert res.memory == 32 * 1000**3
    assert res.spot is True
    assert res.nodes == 1
    assert spec.inputs["train"].uri == "gs://data-bucket/data"
    assert spec.inputs["train"].mode == "copy"
    # a local input path, like code, is relative to the spec file's folder
    assert Path(spec.inputs["labels"].uri) == Path(spec.code) / "labels.csv"
    assert spec.outputs == "gs://data-bucket/runs/{job_id}"
    assert spec.hyperparameters == {"lr": 0.001, "batch_size": 64}
    assert spec.env == {"WANDB_MODE": "offline"}
    assert spec.secrets == ("HF_TOKEN",)
    assert spec.limits.max_runtime == 6 * 3600
    assert spec.limits.max_cost == 20
    assert spec.retries.on_preemption == 20
    assert spec.retries.on_error == 1
    assert spec.checkpoint.every == 600
    assert spec.backend == "local"


def test_stored_spec_validates_back_to_the_same_spec(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "job.yaml", FULL_SPEC))
    data = spec.to_json()
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # plain data
    assert spec_from_dict(data) == spec


def test_defaults() -> None:
    spec = spec_from_dict({})
    assert spec.code == "."
    assert spec.command is None
    assert spec.environment.kind == "python"
    assert spec.resources.nodes == 1
    assert spec.resources.spot is False
    assert spec.resources.gpu_count == 0
    assert spec.retries.on_preemption == 20
    assert spec.retries.on_error == 0
    assert spec.backend is None


def test_an_empty_file_is_an_empty_spec(tmp_path: Path) -> None:
    assert read_spec_file(write(tmp_path / "job.yaml", "")) == {}
    assert load_spec(write(tmp_path / "job.yaml", "# nothing yet\n")).command is None


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python train.py", ("python", "train.py")),
        ("python -c 'print(1)'", ("python", "-c", "print(1)")),
        (["python", "train.py", "--lr", 0.1, 3], ("python", "train.py", "--lr", "0.1", "3")),
    ],
)
def test_command_text_or_list(command: object, expected: tuple[str, ...]) -> None:
    assert spec_from_dict({"command": command}).command == expected


def test_env_values_become_text() -> None:
    spec = spec_from_dict({"env": {"A": 1, "B": True, "C": 0.5, "D": "x"}})
    assert spec.env == {"A": "1", "B": "true", "C": "0.5", "D": "x"}


def test_tpu_request_is_not_a_gpu_count() -> None:
    res = spec_from_dict({"resources": {"accelerator": "v5litepod-8"}}).resources
    assert res.accelerator == "tpu-v5e-8"
    assert res.gpu_count == 0


def test_secrets_may_be_one_name() -> None:
    assert spec_from_dict({"secrets": "HF_TOKEN"}).secrets == ("HF_TOKEN",)


def test_with_defaults_fills_only_what_is_missing() -> None:
    spec = spec_from_dict({"name": "mine"}).with_defaults(name="derived", backend="local")
    assert (spec.name, spec.backend) == ("mine", "local")


# ---------------------------------------------------------------------------------------
# Flags override the file (deep merge); relative code follows the file


def test_flags_override_the_file_deeply(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", FULL_SPEC)
    spec = load_spec(
        path,
        {
            "resources": {"cpus": 2, "accelerator": "H100:8"},
            "env": {"EXTRA": "1"},
            "limits": {"max_cost": 5},
            "command": ["python", "other.py"],
        },
    )
    assert spec.resources.cpus == 2
    assert spec.resources.accelerator == "H100:8"
    assert spec.resources.memory == 32 * 1000**3  # kept from the file
    assert spec.resources.spot is True  # kept from the file
    assert spec.env == {"WANDB_MODE": "offline", "EXTRA": "1"}
    assert spec.limits.max_cost == 5
    assert spec.limits.max_runtime == 6 * 3600  # kept from the file
    assert spec.command == ("python", "other.py")
    assert spec.name == "digits-cnn"


def test_merge_does_not_change_its_arguments() -> None:
    base = {"resources": {"cpus": 8, "memory": "1GB"}, "name": "a"}
    overrides = {"resources": {"cpus": 2}}
    merged = merge(base, overrides)
    assert merged == {"resources": {"cpus": 2, "memory": "1GB"}, "name": "a"}
    assert base == {"resources": {"cpus": 8, "memory": "1GB"}, "name": "a"}
    assert overrides == {"resources": {"cpus": 2}}


def test_a_flag_replaces_a_non_mapping_value() -> None:
    assert merge({"resources": "oops"}, {"resources": {"cpus": 1}}) == {"resources": {"cpus": 1}}
    assert merge({"secrets": ["A"]}, {"secrets": ["B"]}) == {"secrets": ["B"]}


def test_relative_code_is_relative_to_the_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "jobs" / "digits" / "job.yaml", 'code: src\ncommand: "true"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_spec(path).code == str(tmp_path / "jobs" / "digits" / "src")
    # a relative path to the file works from anywhere too
    monkeypatch.chdir(tmp_path)
    assert Path(load_spec("jobs/digits/job.yaml").code).resolve() == (
        tmp_path / "jobs" / "digits" / "src"
    )


def test_code_defaults_to_the_files_folder(tmp_path: Path) -> None:
    path = write(tmp_path / "sub" / "job.yaml", 'command: "true"\n')
    assert load_spec(path).code == str(tmp_path / "sub")


def test_absolute_code_is_kept(tmp_path: Path) -> None:
    code = tmp_path / "abs"
    path = write(tmp_path / "sub" / "job.yaml", f'code: {code}\ncommand: "true"\n')
    assert load_spec(path).code == str(code)


def test_code_from_a_flag_is_not_moved_under_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "sub" / "job.yaml", 'code: src\ncommand: "true"\n')
    assert load_spec(path, {"code": "mine"}).code == "mine"


# ---------------------------------------------------------------------------------------
# Bad input: one SpecError that names the field and what would be valid


def test_spec_error_is_a_usage_error() -> None:
    assert issubclass(SpecError, UsageError)
    assert SpecError("x").exit_code == 2


@pytest.mark.parametrize(
    ("data", "field", "suggestion"),
    [
        ({"commnd": "x"}, "'commnd'", "did you mean command?"),
        ({"resources": {"memroy": "1GB"}}, "'resources.memroy'", "did you mean memory?"),
        ({"limits": {"max_runtme": "1h"}}, "'limits.max_runtme'", "did you mean max_runtime?"),
        ({"retries": {"on_preempt": 1}}, "'retries.on_preempt'", "did you mean on_preemption?"),
        ({"inputs": {"a": {"uri": "x", "mdoe": "copy"}}}, "'inputs.a.mdoe'", "did you mean mode?"),
    ],
)
def test_unknown_field_suggests_the_closest(data: object, field: str, suggestion: str) -> None:
    message = spec_error(data)
    assert "unknown field" in message
    assert field in message
    assert suggestion in message


def test_unknown_field_with_nothing_close_lists_the_known_fields() -> None:
    message = spec_error({"zzzzzz": 1})
    assert "'zzzzzz'" in message
    assert "command" in message and "resources" in message


@pytest.mark.parametrize("memory", ["lots", "-1GB", "", "1.2.3G", "32 G B", True, [1], {"gb": 1}])
def test_bad_memory_size(memory: object) -> None:
    message = spec_error({"resources": {"memory": memory}})
    assert "resources.memory" in message
    assert "32GB" in message  # what would be valid


@pytest.mark.parametrize("memory", [0, "0", "0GB", 0.5])
def test_memory_must_be_above_zero(memory: object) -> None:
    assert "resources.memory" in spec_error({"resources": {"memory": memory}})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("limits.max_runtime", "6x"),
        ("limits.max_runtime", "0"),
        ("limits.max_runtime", -5),
        ("limits.max_runtime", "abc"),
        ("checkpoint.every", "h"),
        ("checkpoint.every", ""),
    ],
)
def test_bad_duration(field: str, value: object) -> None:
    section, key = field.split(".")
    message = spec_error({section: {key: value}})
    assert field in message
    assert "6h" in message


def test_unknown_accelerator_names_the_field_and_the_closest() -> None:
    message = spec_error({"resources": {"accelerator": "A101"}})
    assert "resources.accelerator" in message
    assert "A100" in message


@pytest.mark.parametrize("accelerator", ["A100:0", "A100:x", "tpu-v5e", "", 5])
def test_bad_accelerator(accelerator: object) -> None:
    assert "resources.accelerator" in spec_error({"resources": {"accelerator": accelerator}})


def test_unknown_backend_names_the_known_ones() -> None:
    message = spec_error({"backend": "nope"})
    assert "backend" in message
    assert "'nope'" in message
    assert "local" in message
    assert "did you mean local?" in spec_error({"backend": "locl"})


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "", "Ä", 1])
def test_bad_env_var_names(name: object) -> None:
    message = spec_error({"env": {name: "x"}})
    assert "env" in message
    assert "not an environment variable name" in message


@pytest.mark.parametrize("value", [None, [1], {"a": 1}])
def test_env_values_must_be_text_or_numbers(value: object) -> None:
    message = spec_error({"env": {"A": value}})
    assert "env" in message


@pytest.mark.parametrize("secrets", [["a-b"], ["1X"], [1], "has space"])
def test_bad_secret_names(secrets: object) -> None:
    message = spec_error({"secrets": secrets})
    assert "secrets" in message
    assert "not an environment variable name" in message


@pytest.mark.parametrize("command", ["", "   ", []])
def test_empty_command(command: object) -> None:
    message = spec_error({"command": command})
    assert "command" in message
    assert "empty" in message


@pytest.mark.parametrize("command", [5, True, {"run": "x"}, [["python"]], [True], [None]])
def test_command_of_the_wrong_type(command: object) -> None:
    message = spec_error({"command": command})
    assert "command" in message
    assert "list of words" in message


def test_command_with_an_unclosed_quote() -> None:
    message = spec_error({"command": "python -c 'print(1)"})
    assert "command" in message
    assert "cannot split" in message


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "has space"}, "name"),
        ({"name": "-starts-with-dash"}, "name"),
        ({"name": 5}, "name"),
        ({"code": 5}, "code"),
        ({"shell": "maybe"}, "shell"),
        ({"environment": "x"}, "environment"),
        ({"environment": {"python": "3.9"}}, "environment.python"),
        ({"environment": {"python": "current", "image": "x"}}, "environment"),
        ({"resources": {"cpus": 0}}, "resources.cpus"),
        ({"resources": {"cpus": "many"}}, "resources.cpus"),
        ({"resources": {"cpus": math.nan}}, "resources.cpus"),
        ({"resources": {"nodes": 0}}, "resources.nodes"),
        ({"resources": {"spot": "perhaps"}}, "resources.spot"),
        ({"resources": None}, "resources"),
        ({"inputs": []}, "inputs"),
        ({"inputs": {"1bad": "x"}}, "inputs"),
        ({"inputs": {"a": ""}}, "inputs.a.uri"),
        ({"inputs": {"a": {"uri": "x", "mode": "bad"}}}, "inputs.a.mode"),
        ({"outputs": 5}, "outputs"),
        ({"hyperparameters": {"lr": math.nan}}, "hyperparameters"),
        ({"hyperparameters": {"": 1}}, "hyperparameters"),
        ({"limits": {"max_cost": 0}}, "limits.max_cost"),
        ({"retries": {"on_error": -1}}, "retries.on_error"),
        ({"retries": {"on_preemption": "x"}}, "retries.on_preemption"),
    ],
)
def test_other_bad_fields_are_named(data: dict[str, Any], field: str) -> None:
    assert f": {field}:" in spec_error(data)


def test_infinite_cpus_are_refused_by_the_spec() -> None:
    # `--cpus inf` / `cpus: .inf` is not a number of cores; today it passes the spec and
    # fails later as "the job asks for inf CPUs" (exit 1) instead of naming the field.
    assert "resources.cpus" in spec_error({"resources": {"cpus": math.inf}})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"resources": {"memory": "9" * 400 + "TB"}}, "resources.memory"),
        ({"limits": {"max_runtime": 10**400}}, "limits.max_runtime"),
        ({"checkpoint": {"every": 10**400}}, "checkpoint.every"),
    ],
)
def test_numbers_too_large_to_compute_give_a_spec_error(data: dict[str, Any], field: str) -> None:
    # YAML reads long digit strings as huge ints; they must not escape as OverflowError.
    assert field in spec_error(data)


def test_several_problems_are_counted() -> None:
    message = spec_error({"resources": {"cpus": -1, "memory": "lots"}, "backend": "nope"})
    assert "(and 2 more problems)" in message


@pytest.mark.parametrize("data", [[], "name: x", None, 5])
def test_not_a_mapping(data: object) -> None:
    assert "expected a mapping" in spec_error(data)


# Files


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", "resources: {memory: lots}\n")
    message = file_error(path)
    assert message.startswith(f"{path}: resources.memory:")


def test_yaml_syntax_error_reports_the_line(tmp_path: Path) -> None:
    path = write(
        tmp_path / "job.yaml",
        "name: x\ncommand: python train.py\nresources:\n  cpus: 8\n memory: 1GB\n",
    )
    message = file_error(path)
    assert str(path) in message
    assert "line 5" in message
    assert "YAML" in message


def test_yaml_tab_indentation_reports_the_line(tmp_path: Path) -> None:
    message = file_error(write(tmp_path / "job.yaml", "name: x\n\tcommand: y\n"))
    assert "line 2" in message


def test_yaml_unsafe_tags_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", "command: !!python/object/apply:os.system [echo hi]\n")
    assert "line 1" in file_error(path)


def test_a_list_at_the_top_level(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", "- name: x\n- command: y\n")
    message = file_error(path)
    assert str(path) in message
    assert "expected a mapping" in message


def test_a_text_at_the_top_level(tmp_path: Path) -> None:
    assert "expected a mapping" in file_error(write(tmp_path / "job.yaml", "python train.py\n"))


def test_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.yaml"
    message = file_error(path)
    assert str(path) in message
    assert "does not exist" in message


def test_a_folder_given_as_the_spec_file(tmp_path: Path) -> None:
    message = file_error(tmp_path)
    assert str(tmp_path) in message
    assert "folder" in message


def test_a_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage\x80")
    assert str(path) in file_error(path)


def test_deeply_nested_yaml(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", "hyperparameters: " + "[" * 5000 + "]" * 5000 + "\n")
    file_error(path)


# ---------------------------------------------------------------------------------------
# Properties: any input gives a JobSpec or a SpecError, never another exception


def _field_names(model: type[BaseModel], seen: set[str]) -> None:
    for name, field in model.model_fields.items():
        seen.add(name)
        for arg in (*getattr(field.annotation, "__args__", ()), field.annotation):
            for sub in (arg, *getattr(arg, "__args__", ())):
                if isinstance(sub, type) and issubclass(sub, BaseModel) and sub is not model:
                    _field_names(sub, seen)


_names: set[str] = set()
_field_names(JobSpec, _names)
FIELD_NAMES = sorted(_names)
TOP_FIELDS = list(JobSpec.model_fields)

# Values that look right somewhere, so nesting reaches the validators past the type checks.
PLAUSIBLE = st.sampled_from(
    [
        "A100:1",
        "tpu-v5e-8",
        "32GB",
        "6h",
        "10m",
        "local",
        "python train.py",
        "copy",
        "current",
        "gs://b/x",
        "HF_TOKEN",
        "x" * 70,
        "9" * 400 + "TB",
    ]
)

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, -1, 10**400, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    PLAUSIBLE,
)
KEYS = st.one_of(
    st.sampled_from(FIELD_NAMES),
    st.text(max_size=8),
    st.sampled_from([1, None, True, 2.5]),  # YAML gives non-text keys too
)
JSONISH = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(KEYS, children, max_size=5),
    ),
    max_leaves=20,
)
# A top-level mapping whose keys are mostly real fields, so sub-models are reached.
SPEC_DATA = st.one_of(
    st.dictionaries(st.sampled_from(TOP_FIELDS), JSONISH, max_size=6),
    st.dictionaries(KEYS, JSONISH, max_size=6),
    JSONISH,
)


@settings(max_examples=300, deadline=None)
@given(SPEC_DATA)
@example({"resources": {"memory": "9" * 400 + "TB"}})
@example({"limits": {"max_runtime": 10**400}})
@example({"command": [10**400]})
def test_any_data_gives_a_spec_or_a_spec_error(data: object) -> None:
    try:
        spec = spec_from_dict(data)
    except SpecError as exc:
        assert str(exc)
        return
    assert isinstance(spec, JobSpec)
    assert spec_from_dict(spec.to_json()) == spec  # what is stored loads back


@pytest.fixture(scope="module")
def yaml_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


YAML_PIECES = st.sampled_from(
    [
        "name: x",
        "command: python train.py",
        "resources:",
        "  memory: 32GB",
        "  accelerator: A100:1",
        "  cpus: 8",
        "limits: {max_runtime: 6h}",
        "env: {A: 1}",
        "inputs:",
        "  train: gs://b/x",
        "- a",
        "  - b",
        "? [a]",
        ": b",
        "&a x",
        "*a",
        "!!binary aGk=",
        "!!set {a}",
        "!!python/name:os.system",
        "{",
        "[",
        "'",
        '"',
        "\t",
        "---",
        "...",
        "%YAML 1.1",
        "key: 2001-12-14",
        "code: ~",
        "code: sub",
        "memory: .inf",
        "hyperparameters: {a: .nan}",
    ]
)
YAML_TEXT = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(YAML_PIECES, st.text(max_size=10)), max_size=8).map("\n".join),
    JSONISH.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    st.tuples(
        st.dictionaries(st.sampled_from(TOP_FIELDS), JSONISH, max_size=4),
        st.integers(0, 200),
        st.text(max_size=3),
    ).map(lambda t: _splice(yaml.safe_dump(t[0], allow_unicode=True), t[1], t[2])),
)


def _splice(text: str, at: int, junk: str) -> str:
    at = min(at, len(text))
    return text[:at] + junk + text[at + 1 :]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(YAML_TEXT)
@example("resources: {memory: " + "9" * 400 + "TB}\n")
@example("limits: {max_runtime: " + "9" * 400 + "}\n")
@example('0: "\\U00110000')  # an escape past the last code point: the parser's ValueError
def test_any_yaml_text_gives_a_spec_or_a_spec_error(yaml_dir: Path, text: str) -> None:
    path = yaml_dir / "job.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        spec = load_spec(path)
    except SpecError as exc:
        assert str(exc)
        return
    assert isinstance(spec, JobSpec)


ODD_TEXT = st.one_of(
    st.text(),
    st.text(alphabet="0123456789.:-_ kKmMgGiIbBtTsShHdD", max_size=12),
    st.from_regex(r"\A\s*[0-9]{1,500}(\.[0-9]*)?\s*[a-zA-Z]{0,4}\s*\Z"),
)


@settings(max_examples=250, deadline=None)
@given(ODD_TEXT)
@example("9" * 400 + "TB")
@example("lots")
def test_any_memory_text(text: str) -> None:
    try:
        spec = spec_from_dict({"resources": {"memory": text}})
    except SpecError as exc:
        assert "resources.memory" in str(exc)
        return
    assert isinstance(spec.resources.memory, int)
    assert spec.resources.memory > 0


@settings(max_examples=250, deadline=None)
@given(ODD_TEXT)
@example("9" * 400 + "d")
@example("6x")
def test_any_max_runtime_text(text: str) -> None:
    try:
        spec = spec_from_dict({"limits": {"max_runtime": text}})
    except SpecError as exc:
        assert "limits.max_runtime" in str(exc)
        return
    seconds = spec.limits.max_runtime
    assert seconds is not None
    assert 0 < seconds < math.inf


@settings(max_examples=250, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.text(alphabet="AaHh0123456789:-tpuvelitpodTPU ", max_size=14),
        st.sampled_from(["A100:²", "tpu-v5e-0", "A100:0", "a100", "v5litepod-8"]),
    )
)
@example("tpu-v5e-0")
def test_any_accelerator_text(text: str) -> None:
    try:
        spec = spec_from_dict({"resources": {"accelerator": text}})
    except SpecError as exc:
        assert "resources.accelerator" in str(exc)
        return
    acc = spec.resources.accelerator_request
    assert acc is not None
    assert acc.count >= 1
    assert str(acc) == spec.resources.accelerator  # stored in canonical form


def test_a_sweep_section_is_read_and_checked() -> None:
    spec = spec_from_dict(
        {
            "command": "python train.py",
            "sweep": {
                "params": {"lr": "loguniform:1e-4:1e-1", "batch": [32, 64], "act": ["relu"]},
                "objective": "val_loss:min",
                "trials": 40,
                "parallel": 4,
                "sampler": "grid",
                "seed": 7,
            },
        }
    )
    assert spec.sweep is not None
    assert spec.sweep.params == {
        "lr": "loguniform:1e-4:1e-1",
        "batch": "choice:32,64",
        "act": "choice:relu",
    }
    assert (spec.sweep.trials, spec.sweep.parallel, spec.sweep.pruner) == (40, 4, "median")
    assert spec_from_dict({"command": "x"}).sweep is None
    for sweep, says in (
        ({"params": {"lr": "loguniform:0:1"}}, "sweep.params: 'lr=loguniform:0:1'"),
        ({"params": {"lr": 0.1}}, "lr: 0.1 is not KIND:ARGS"),
        ({"params": {"lr": "normal:0:1"}}, "'normal' is not a kind of parameter"),
        ({"objective": "val_loss"}, "sweep.objective: 'val_loss' does not say which way"),
        ({"sampler": "bayes"}, "sweep.sampler"),
        ({"parallel": 0}, "sweep.parallel"),
        ({"trails": 3}, "did you mean trials?"),
    ):
        said = spec_error({"command": "x", "sweep": sweep})
        assert says in said, said


def test_a_sweep_sections_conditions_are_read_and_checked_against_its_params() -> None:
    params = {
        "classifier": ["SVC", "RandomForest"],
        "svc_c": "loguniform:1e-10:1e10 if classifier=SVC",
        "rf_max_depth": "int:2:32 if classifier=RandomForest",
    }
    spec = spec_from_dict({"command": "x", "sweep": {"params": params}})
    assert spec.sweep is not None
    assert spec.sweep.params["svc_c"] == "loguniform:1e-10:1e10 if classifier=SVC"
    for changed, says in (
        ({"svc_c": "loguniform:1e-10:1e10 if clf=SVC"}, "the sweep has no parameter clf"),
        ({"svc_c": "uniform:0:1 if classifier=SVM"}, "SVM is not one of classifier's choices"),
        ({"svc_c": "uniform:0:1 if classifier"}, "its condition 'classifier' is not PARAM="),
        ({"classifier": "int:1:2"}, "classifier=int:1:2 is not a choice"),
    ):
        said = spec_error({"command": "x", "sweep": {"params": {**params, **changed}}})
        assert "sweep.params" in said and says in said, said
