"""The accelerator vocabulary: ``A100:1`` parsing, aliases, machine types, canonical names,
clear refusals, and each backend's own names both ways."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferry.accelerator_names import (
    BACKENDS,
    BackendName,
    RayRequest,
    SageMakerInstance,
    VertexMachine,
    backend_name,
    from_backend_name,
)
from ferry.accelerators import ALIASES, GPUS, TPUS, Accelerator, canonical_name, parse_accelerator
from ferry.backends.ray_names import RAY_LABELS, TPU_POD_TYPE_PREFIXES
from ferry.backends.sagemaker_names import SAGEMAKER_INSTANCES
from ferry.backends.vertex_names import (
    VERTEX_ACCELERATOR_TYPES,
    VERTEX_GPU_MACHINES,
    VERTEX_N1_MACHINES,
    VERTEX_TPU_MACHINES,
)
from ferry.machines import parse_request


@pytest.mark.parametrize(
    ("text", "name", "count"),
    [
        ("A100:1", "A100", 1),
        ("a100", "A100", 1),
        ("A100", "A100", 1),
        ("H100:8", "H100", 8),
        ("h100:8", "H100", 8),
        (" H100:8 ", "H100", 8),
        ("A100-80GB:2", "A100-80GB", 2),
        ("a100-80gb:2", "A100-80GB", 2),
        ("nvidia-tesla-a100", "A100", 1),
        ("nvidia-tesla-a100:4", "A100", 4),
        ("NVIDIA_TESLA_T4:2", "T4", 2),
        ("nvidia-h100-80gb:8", "H100", 8),
        ("nvidia-l4", "L4", 1),
        ("nvidia-a10g", "A10G", 1),
        ("T4g", "T4g", 1),
        ("tpu-v5e-8", "tpu-v5e", 8),
        ("TPU-V5E-8", "tpu-v5e", 8),
        ("v5e-8", "tpu-v5e", 8),
        ("v5litepod-8", "tpu-v5e", 8),
        ("tpu-v5litepod-16", "tpu-v5e", 16),
        ("tpu-v4-32", "tpu-v4", 32),
        ("v5p-128", "tpu-v5p", 128),
        ("tpu-v5e:8", "tpu-v5e", 8),
    ],
)
def test_parse_accelerator(text: str, name: str, count: int) -> None:
    acc = parse_accelerator(text)
    assert acc == Accelerator(name, count)


def test_gpus_and_tpus_know_which_they_are() -> None:
    assert parse_accelerator("tpu-v5e-8").is_tpu
    assert not parse_accelerator("A100:1").is_tpu
    assert str(parse_accelerator("tpu-v5e-8")) == "tpu-v5e-8"
    assert str(parse_accelerator("a100")) == "A100:1"


def test_unknown_accelerator_suggests_the_closest_names() -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator("A101")
    message = str(info.value)
    assert "'A101'" in message
    assert "did you mean" in message
    assert "A100" in message


def test_unknown_accelerator_with_nothing_close_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator("quantum-widget:2")
    message = str(info.value)
    assert "quantum-widget" in message
    assert "A100" in message and "tpu-v5e" in message


@pytest.mark.parametrize(
    "bad", ["A100:0", "A100:x", "A100:", "A100:-1", "A100:1.5", "A100:1:2", "A100:+2", "A100:00"]
)
def test_count_must_be_a_whole_number_of_at_least_one(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator(bad)
    assert "at least 1" in str(info.value)


def test_count_in_other_scripts_digits_gets_the_same_clear_message() -> None:
    # "²" is a digit to str.isdigit() but not to int(): the message must still say
    # what is wrong, not "invalid literal for int() with base 10".
    with pytest.raises(ValueError) as info:
        parse_accelerator("A100:²")
    assert "at least 1" in str(info.value)


@pytest.mark.parametrize("bad", ["tpu-v5e-0", "v5litepod-0", "tpu-v4-00"])
def test_a_tpu_slice_has_at_least_one_chip(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_accelerator(bad)


@pytest.mark.parametrize("bad", ["", "   ", None, 1, 1.0, True, ["A100:1"], {"A100": 1}])
def test_empty_or_not_text(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator(bad)
    assert "A100:1" in str(info.value)  # says what would be valid


@pytest.mark.parametrize("bad", ["tpu-v5e", "v5litepod", "TPU-V4"])
def test_a_tpu_needs_its_slice_size(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator(bad)
    message = str(info.value)
    assert "how many TPU chips" in message
    assert "-8" in message  # shows the form to use


def test_unknown_tpu_generation() -> None:
    with pytest.raises(ValueError) as info:
        parse_accelerator("tpu-v99-8")
    assert "unknown accelerator" in str(info.value)


@pytest.mark.parametrize("name", [*GPUS, *TPUS])
def test_canonical_names_are_their_own_canonical_name(name: str) -> None:
    assert canonical_name(name) == name
    assert canonical_name(name.lower()) == name
    assert canonical_name(name.upper()) == name


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_every_alias_maps_to_a_known_name(alias: str, name: str) -> None:
    assert name in GPUS or name in TPUS
    assert canonical_name(alias) == name


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from([*GPUS, *TPUS, *ALIASES]), count=st.integers(1, 4096))
def test_canonical_form_round_trips(name: str, count: int) -> None:
    """str(Accelerator) parses back to the same value, and is already canonical."""
    text = f"{name}-{count}" if name.lower().startswith("tpu-") else f"{name}:{count}"
    acc = parse_accelerator(text)
    assert acc.count == count
    assert parse_accelerator(str(acc)) == acc
    assert str(parse_accelerator(str(acc))) == str(acc)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
@example("A100:²")
@example("tpu-v5e-0")
def test_any_text_parses_to_a_canonical_request_or_raises_value_error(text: str) -> None:
    try:
        acc = parse_accelerator(text)
    except ValueError:
        return
    assert acc.count >= 1
    assert acc.name in GPUS or acc.name in TPUS
    assert parse_accelerator(str(acc)) == acc


# --- aliases and machine types ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a100", "A100:1"),
        ("A100-40GB", "A100:1"),
        ("nvidia-tesla-a100", "A100:1"),
        ("NVIDIA_TESLA_A100", "A100:1"),
        ("nvidia-a100-80gb", "A100-80GB:1"),
        ("NVIDIA_A100_80GB", "A100-80GB:1"),
        ("NVIDIA_H100_80GB", "H100:1"),
        ("NVIDIA_H100_MEGA_80GB:8", "H100:8"),
        ("NVIDIA_H200_141GB:8", "H200:8"),
        ("NVIDIA_L4", "L4:1"),
        ("NVIDIA_TESLA_T4:4", "T4:4"),
        ("TPU_V2:8", "tpu-v2-8"),
        ("TPU_V3:32", "tpu-v3-32"),
        ("TPU_V4_POD:16", "tpu-v4-16"),
        ("TPU_V5_LITEPOD:8", "tpu-v5e-8"),
        ("TPU_V5_LITEPOD-8", "tpu-v5e-8"),
        ("tpu-v5e-8", "tpu-v5e-8"),
        ("v5litepod-8", "tpu-v5e-8"),
        ("tpu-v5litepod-8", "tpu-v5e-8"),
        # Ray's labels (ray/util/accelerators/accelerators.py)
        ("A100", "A100:1"),
        ("A100-40G", "A100:1"),
        ("A100-80G:2", "A100-80GB:2"),
        ("A10G", "A10G:1"),
        ("L40S:4", "L40S:4"),
        ("AMD-Instinct-MI300X-OAM:8", "MI300X:8"),
        ("TPU-V5LITEPOD:4", "tpu-v5e-4"),
        ("TPU-V6E:8", "tpu-v6e-8"),
        ("TPU-V5P:8", "tpu-v5p-8"),
    ],
)
def test_provider_and_backend_spellings_parse(text: str, expected: str) -> None:
    assert str(parse_accelerator(text)) == expected


@pytest.mark.parametrize(("vertex_type", "name"), sorted(VERTEX_ACCELERATOR_TYPES.items()))
def test_every_vertex_accelerator_type_is_known(vertex_type: str, name: str) -> None:
    assert canonical_name(vertex_type) == name
    assert canonical_name(vertex_type.lower().replace("_", "-")) == name


@pytest.mark.parametrize(("label", "name"), sorted(RAY_LABELS.items()))
def test_every_ray_label_is_known(label: str, name: str) -> None:
    assert canonical_name(label) == name


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        # aws: from the SageMaker table, and from the catalog alone
        ("p4d.24xlarge", "A100:8"),
        ("ml.p4d.24xlarge", "A100:8"),
        ("ML.P4D.24XLARGE", "A100:8"),
        ("g5.xlarge", "A10G:1"),
        ("p5.48xlarge", "H100:8"),
        ("g4dn.metal", "T4:8"),
        ("g5g.xlarge", "T4g:1"),
        # gcp
        ("a2-highgpu-8g", "A100:8"),
        ("a2-ultragpu-1g", "A100-80GB:1"),
        ("a3-highgpu-8g", "H100:8"),
        ("a3-megagpu-8g", "H100:8"),
        ("g2-standard-4", "L4:1"),
        ("g2-standard-48", "L4:4"),
        ("ct5lp-hightpu-4t", "tpu-v5e-4"),
        # azure, with and without the Standard_ prefix
        ("Standard_ND96asr_v4", "A100:8"),
        ("standard_nd96asr_v4", "A100:8"),
        ("ND96asr_v4", "A100:8"),
        ("Standard_NC24ads_A100_v4", "A100-80GB:1"),
        ("Standard_ND96isr_H100_v5", "H100:8"),
        # lambda
        ("gpu_8x_a100", "A100:8"),
        ("gpu_1x_h100_sxm5", "H100:1"),
    ],
)
def test_a_machine_type_stands_for_its_accelerators(machine: str, expected: str) -> None:
    assert str(parse_request(machine)) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("p4d.24xlarge:2", ['"p4d.24xlarge"', "A100:8", "no count", '"A100:2"']),
        ("ml.p4d.24xlarge:1", ["A100:8", "no count", '"A100:1"']),
        ("a2-highgpu-8g:8", ["A100:8", "no count", '"A100:8"']),
        ("ct5lp-hightpu-4t:2", ["tpu-v5e-4", "no count"]),
    ],
)
def test_a_machine_type_takes_no_count(text: str, says: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        parse_request(text)
    for words in says:
        assert words in str(info.value)


@pytest.mark.usefixtures("home")
def test_a_catalog_machine_type_takes_no_count() -> None:
    with pytest.raises(ValueError) as info:
        parse_request("Standard_ND96asr_v4:2")
    assert "Standard_ND96asr_v4" in str(info.value) and "no count" in str(info.value)


@pytest.mark.usefixtures("home")
def test_a_machine_type_that_takes_several_gpus_asks_which() -> None:
    with pytest.raises(ValueError) as info:
        parse_request("n1-standard-8")
    message = str(info.value)
    assert "n1-standard-8" in message
    assert all(gpu in message for gpu in ("P100", "P4", "T4", "V100"))
    assert "name the accelerator" in message


@pytest.mark.usefixtures("home")
@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("p4d.24xlarg", "p4d.24xlarge"),
        ("a2-highgpu-8", "a2-highgpu-8g"),
        ("gpu_8x_a10O", "gpu_8x_a100"),
    ],
)
def test_a_mistyped_machine_type_suggests_the_closest(typo: str, meant: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_request(typo)
    assert "did you mean" in str(info.value)
    assert meant in str(info.value)


def test_the_core_parser_refuses_machine_types_that_parse_request_reads() -> None:
    # ferry.accelerators knows names only (the catalog and the backends build on it);
    # ferry.machines adds machine types
    with pytest.raises(ValueError, match=r"unknown accelerator 'p4d\.24xlarge'"):
        parse_accelerator("p4d.24xlarge")
    assert parse_request("p4d.24xlarge") == Accelerator("A100", 8)
    assert parse_request("A100:2") == parse_accelerator("A100:2")


def test_known_names_parse_without_the_catalog_and_quickly() -> None:
    """``import ferry.accelerators`` and parsing known names leave the catalog unimported."""
    script = (
        "import sys, time\n"
        "from ferry.accelerators import parse_accelerator\n"
        "for text in ('A100:1', 'a100', 'tpu-v5e-8', 'NVIDIA_TESLA_T4:2', 'A100-80G'):\n"
        "    parse_accelerator(text)\n"
        "start = time.perf_counter()\n"
        "for _ in range(2000):\n"
        "    parse_accelerator('A100:1')\n"
        "per_call = (time.perf_counter() - start) / 2000\n"
        "print(sorted(m for m in sys.modules if m.startswith('ferry')), per_call)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    modules, per_call = out.rsplit(" ", 1)
    assert "ferry.catalog" not in modules
    assert float(per_call) < 50e-6  # microseconds in practice; generous for a busy machine


@pytest.mark.usefixtures("home")
def test_the_backend_tables_agree_with_the_catalog() -> None:
    from ferry.catalog import load_catalog

    catalog = load_catalog()
    rows = {(o.provider, o.instance_type): (o.accelerator, o.count) for o in catalog.offerings}
    checked = 0
    for instance_type, kind in SAGEMAKER_INSTANCES.items():
        if ("aws", instance_type.removeprefix("ml.")) in rows:
            assert rows["aws", instance_type.removeprefix("ml.")] == kind, instance_type
            checked += 1
    for machine, (vertex_type, count) in VERTEX_GPU_MACHINES.items():
        if ("gcp", machine) in rows:
            assert rows["gcp", machine] == (VERTEX_ACCELERATOR_TYPES[vertex_type], count), machine
            checked += 1
    assert checked >= 30


def test_sagemaker_instance_types_are_ones_the_api_accepts() -> None:
    botocore_session = pytest.importorskip("botocore.session")
    model = botocore_session.get_session().get_service_model("sagemaker")
    accepted = set(model.shape_for("TrainingInstanceType").enum)
    assert set(SAGEMAKER_INSTANCES) <= accepted


def test_the_backend_tables_name_only_known_accelerators() -> None:
    known = {*GPUS, *TPUS}
    assert set(VERTEX_ACCELERATOR_TYPES.values()) <= known
    assert set(RAY_LABELS.values()) <= known
    assert {name for name, _ in SAGEMAKER_INSTANCES.values()} <= known
    assert {gen for gen, _ in VERTEX_TPU_MACHINES.values()} <= known
    assert set(TPU_POD_TYPE_PREFIXES) == set(TPUS)
    assert {t for t, _ in VERTEX_GPU_MACHINES.values()} <= set(VERTEX_ACCELERATOR_TYPES)
    assert set(VERTEX_N1_MACHINES) <= set(VERTEX_ACCELERATOR_TYPES)


# --- each backend's names --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "machine"),
    [
        ("A100:1", VertexMachine("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1)),
        ("A100:8", VertexMachine("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8)),
        ("A100:3", VertexMachine("a2-highgpu-4g", "NVIDIA_TESLA_A100", 4)),
        ("A100:16", VertexMachine("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16)),
        ("A100-80GB:4", VertexMachine("a2-ultragpu-4g", "NVIDIA_A100_80GB", 4)),
        ("H100:8", VertexMachine("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)),
        ("H100:1", VertexMachine("a3-highgpu-1g", "NVIDIA_H100_80GB", 1)),
        ("H200:8", VertexMachine("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8)),
        ("B200:8", VertexMachine("a4-highgpu-8g", "NVIDIA_B200", 8)),
        ("L4:1", VertexMachine("g2-standard-4", "NVIDIA_L4", 1)),
        ("L4:2", VertexMachine("g2-standard-24", "NVIDIA_L4", 2)),
        ("L4:8", VertexMachine("g2-standard-96", "NVIDIA_L4", 8)),
        ("T4:1", VertexMachine("n1-standard-8", "NVIDIA_TESLA_T4", 1)),
        ("T4:3", VertexMachine("n1-standard-32", "NVIDIA_TESLA_T4", 4)),
        ("P100:2", VertexMachine("n1-standard-16", "NVIDIA_TESLA_P100", 2)),
        ("P4:4", VertexMachine("n1-standard-32", "NVIDIA_TESLA_P4", 4)),
        ("V100:8", VertexMachine("n1-standard-64", "NVIDIA_TESLA_V100", 8)),
        ("tpu-v2-8", VertexMachine("cloud-tpu", "TPU_V2", 8)),
        ("tpu-v3-32", VertexMachine("cloud-tpu", "TPU_V3", 32)),
        ("tpu-v5e-1", VertexMachine("ct5lp-hightpu-1t", tpu_topology="1x1")),
        ("tpu-v5e-4", VertexMachine("ct5lp-hightpu-4t", tpu_topology="2x2")),
        ("tpu-v5e-8", VertexMachine("ct5lp-hightpu-8t", tpu_topology="2x4")),
        ("tpu-v5e-16", VertexMachine("ct5lp-hightpu-4t", tpu_topology="4x4")),
        ("tpu-v5e-256", VertexMachine("ct5lp-hightpu-4t", tpu_topology="16x16")),
        ("tpu-v6e-8", VertexMachine("ct6e-standard-8t", tpu_topology="2x4")),
        ("tpu-v6e-64", VertexMachine("ct6e-standard-4t", tpu_topology="8x8")),
    ],
)
def test_vertex_machine_specs(request_: str, machine: VertexMachine) -> None:
    assert backend_name(request_, "vertex") == machine
    assert backend_name(parse_accelerator(request_), "vertex") == machine


@pytest.mark.parametrize(
    ("request_", "instance"),
    [
        ("A100:8", SageMakerInstance("ml.p4d.24xlarge", 8)),
        ("A100:1", SageMakerInstance("ml.p4d.24xlarge", 8)),
        ("A100-80GB:8", SageMakerInstance("ml.p4de.24xlarge", 8)),
        ("A10G:1", SageMakerInstance("ml.g5.xlarge", 1)),
        ("A10G:2", SageMakerInstance("ml.g5.12xlarge", 4)),
        ("A10G:8", SageMakerInstance("ml.g5.48xlarge", 8)),
        ("H100:8", SageMakerInstance("ml.p5.48xlarge", 8)),
        ("H100:1", SageMakerInstance("ml.p5.4xlarge", 1)),
        ("H200:8", SageMakerInstance("ml.p5en.48xlarge", 8)),
        ("B200:8", SageMakerInstance("ml.p6-b200.48xlarge", 8)),
        ("T4:1", SageMakerInstance("ml.g4dn.xlarge", 1)),
        ("T4:4", SageMakerInstance("ml.g4dn.12xlarge", 4)),
        ("V100:1", SageMakerInstance("ml.p3.2xlarge", 1)),
        ("V100-32GB:8", SageMakerInstance("ml.p3dn.24xlarge", 8)),
        ("L4:1", SageMakerInstance("ml.g6.xlarge", 1)),
        ("L4:4", SageMakerInstance("ml.g6.12xlarge", 4)),
        ("L40S:1", SageMakerInstance("ml.g6e.xlarge", 1)),
    ],
)
def test_sagemaker_instance_types(request_: str, instance: SageMakerInstance) -> None:
    assert backend_name(request_, "sagemaker") == instance


@pytest.mark.parametrize(
    ("request_", "ray"),
    [
        ("A100:2", RayRequest("A100", 2)),
        ("A100-80GB:1", RayRequest("A100-80G", 1)),
        ("H100:8", RayRequest("H100", 8)),
        ("A10G:1", RayRequest("A10G", 1)),
        ("T4:3", RayRequest("T4", 3)),
        ("MI300X:8", RayRequest("AMD-Instinct-MI300X-OAM", 8)),
        ("tpu-v5e-8", RayRequest("TPU-V5LITEPOD", 8, "v5litepod-8")),
        ("tpu-v4-16", RayRequest("TPU-V4", 16, "v4-16")),
        ("tpu-v6e-4", RayRequest("TPU-V6E", 4, "v6e-4")),
    ],
)
def test_ray_requests(request_: str, ray: RayRequest) -> None:
    assert backend_name(request_, "ray") == ray


@pytest.mark.parametrize(
    ("request_", "backend"),
    [
        ("A10G:1", "vertex"),  # an AWS GPU
        ("K80:1", "vertex"),  # end of support
        ("H200:16", "vertex"),
        ("T4:8", "vertex"),
        ("tpu-v4-8", "vertex"),  # no training configuration on Vertex AI
        ("tpu-v5p-8", "vertex"),
        ("tpu-v5e-2", "vertex"),  # no such slice
        ("tpu-v5e-512", "vertex"),
        ("tpu-v2-16", "vertex"),
        ("tpu-v5e-8", "sagemaker"),
        ("H100:16", "sagemaker"),
        ("A6000:1", "sagemaker"),
        ("V100-32GB:1", "ray"),  # Ray's "V100" does not tell 16 GB from 32 GB
        ("A6000:1", "ray"),
        ("GH200:1", "ray"),
    ],
)
def test_none_where_a_backend_has_no_such_accelerator(request_: str, backend: str) -> None:
    assert backend_name(request_, backend) is None


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError) as info:
        backend_name("A100:1", "local")
    assert "'local'" in str(info.value) and "vertex, sagemaker, ray" in str(info.value)
    with pytest.raises(ValueError) as info:
        from_backend_name("A100", "azure")
    assert "'azure'" in str(info.value)


_COUNTS = [1, 2, 3, 4, 8, 16, 32, 64, 256]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [*GPUS, *TPUS])
def test_round_trip_through_each_backend(name: str, backend: str) -> None:
    """canonical -> backend name -> canonical gives back the kind, and the count where the
    backend offers exactly that many (otherwise the next size up it offers)."""
    for count in _COUNTS:
        acc = Accelerator(name, count)
        named = backend_name(acc, backend)
        if named is None:
            continue
        back = from_backend_name(named)
        assert back.name == name
        if acc.is_tpu or backend == "ray":
            assert back == acc
        else:
            assert back.count >= count
            if back.count == count:
                assert back == acc


@pytest.mark.parametrize(
    ("request_", "backend"),
    [
        ("A100:8", "vertex"),
        ("A100-80GB:8", "vertex"),
        ("H100:8", "vertex"),
        ("H200:8", "vertex"),
        ("L4:1", "vertex"),
        ("T4:1", "vertex"),
        ("tpu-v5e-8", "vertex"),
        ("tpu-v5e-16", "vertex"),
        ("tpu-v3-8", "vertex"),
        ("A100:8", "sagemaker"),
        ("A10G:1", "sagemaker"),
        ("H100:1", "sagemaker"),
        ("A100-80GB:2", "ray"),
        ("tpu-v5e-8", "ray"),
    ],
)
def test_round_trip_examples(request_: str, backend: str) -> None:
    acc = parse_accelerator(request_)
    assert from_backend_name(backend_name(acc, backend) or "") == acc


@pytest.mark.parametrize(
    ("name", "backend", "expected"),
    [
        ("NVIDIA_TESLA_A100", "vertex", "A100:1"),
        ("NVIDIA_TESLA_A100:8", "vertex", "A100:8"),
        ("nvidia-tesla-a100", "vertex", "A100:1"),
        ("NVIDIA_A100_80GB:2", "vertex", "A100-80GB:2"),
        ("NVIDIA_H100_MEGA_80GB:8", "vertex", "H100:8"),
        ("TPU_V3:32", "vertex", "tpu-v3-32"),
        ("a2-highgpu-8g", "vertex", "A100:8"),
        ("a3-megagpu-8g", "vertex", "H100:8"),
        ("ct5lp-hightpu-8t", "vertex", "tpu-v5e-8"),
        ("ct6e-standard-1t", "vertex", "tpu-v6e-1"),
        ("ml.p4d.24xlarge", "sagemaker", "A100:8"),
        ("p4d.24xlarge", "sagemaker", "A100:8"),
        ("ml.g5.xlarge", "sagemaker", "A10G:1"),
        ("ml.p5.4xlarge", "sagemaker", "H100:1"),
        ("A100-80G", "ray", "A100-80GB:1"),
        ("A100-80G:4", "ray", "A100-80GB:4"),
        ("A100-40G", "ray", "A100:1"),
        ("accelerator_type:A100", "ray", "A100:1"),
        ("TPU-V5LITEPOD:8", "ray", "tpu-v5e-8"),
        ("v5litepod-8", "ray", "tpu-v5e-8"),
        ("TPU-v4-16-head", "ray", "tpu-v4-16"),
        # without a backend, any of these and anything parse_accelerator reads
        ("NVIDIA_TESLA_A100", None, "A100:1"),
        ("ml.p4d.24xlarge", None, "A100:8"),
        ("A100-80G", None, "A100-80GB:1"),
        ("accelerator_type:H100", None, "H100:1"),
        ("tpu-v5e-8", None, "tpu-v5e-8"),
    ],
)
def test_from_backend_name(name: str, backend: str | None, expected: str) -> None:
    assert str(from_backend_name(name, backend)) == expected


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        (VertexMachine("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8), "H100:8"),
        (VertexMachine("n1-standard-16", "NVIDIA_TESLA_T4", 2), "T4:2"),
        (VertexMachine("a2-highgpu-4g"), "A100:4"),  # the machine's own GPUs
        (VertexMachine("ct5lp-hightpu-4t", tpu_topology="4x8"), "tpu-v5e-32"),
        (VertexMachine("ct5lp-hightpu-4t"), "tpu-v5e-4"),  # one VM
        (SageMakerInstance("ml.g6.48xlarge", 8), "L4:8"),
        (RayRequest("TPU-V6E", 8, "v6e-8"), "tpu-v6e-8"),
    ],
)
def test_from_backend_name_reads_machine_specs(machine: BackendName, expected: str) -> None:
    assert str(from_backend_name(machine)) == expected


@pytest.mark.parametrize(
    ("name", "backend", "says"),
    [
        ("ml.p4d.24xlarge", "vertex", "not a name vertex uses"),
        ("NVIDIA_TESLA_A100", "sagemaker", "not a name sagemaker uses"),
        ("p4d.24xlarge", "ray", "not a name ray uses"),
        ("Standard_ND96asr_v4", "sagemaker", "ml.p4d.24xlarge"),  # shows what would do
        ("TPU_V2", "vertex", "how many TPU chips"),
        ("a2-highgpu-8g:2", "vertex", "no count"),
        ("", None, "backend's name"),
        (VertexMachine("cloud-tpu"), None, "TPU_V2 or TPU_V3"),
        (VertexMachine("n1-standard-8"), None, "no accelerator of its own"),
        (VertexMachine("a2-highgpu-8g", "NVIDIA_TESLA_A100", 0), None, "0 accelerators"),
        (VertexMachine("x", "NVIDIA_TESLA_Z9", 1), None, "not a Vertex AI accelerator type"),
        (VertexMachine("ct5lp-hightpu-4t", tpu_topology="2xq"), None, "TPU topology"),
    ],
)
def test_from_backend_name_refuses_clearly(
    name: str | BackendName, backend: str | None, says: str
) -> None:
    with pytest.raises(ValueError) as info:
        from_backend_name(name, backend)
    assert says in str(info.value)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from([*GPUS, *TPUS]),
    count=st.integers(1, 4096),
    backend=st.sampled_from(BACKENDS),
)
def test_backend_names_always_read_back_to_the_same_kind(
    name: str, count: int, backend: str
) -> None:
    named = backend_name(Accelerator(name, count), backend)
    if named is not None:
        back = from_backend_name(named)
        assert back.name == name
        assert back.count == count if name.startswith("tpu-") else back.count >= count
