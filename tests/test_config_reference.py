"""docs/configuration.md documents every key Oloproof reads: the pydantic models of
``oloproof.yaml``, ``release.yaml`` and case files, walked recursively, every evaluator type the
registry knows with each of its options, label files and the exit codes."""

import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from oloproof.config.cases import CaseModel
from oloproof.config.models import (
    MetamorphicConfig,
    MetricConfig,
    ProjectConfig,
    ReleaseConfig,
    SystemConfig,
    TransformConfig,
)
from oloproof.evaluate.registry import registry

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGE = (DOCS / "configuration.md").read_text(encoding="utf-8")

#: the heading of the section that documents a model's keys (a nested model with no entry
#: here is documented in its parent's section)
SECTIONS: dict[type, str] = {
    ProjectConfig: "## `oloproof.yaml`",
    SystemConfig: "### `system`",
    MetricConfig: "### `metrics`",
    MetamorphicConfig: "### `metamorphic`",
    TransformConfig: "### `metamorphic`",
    ReleaseConfig: "## `release.yaml`",
    CaseModel: "## Case files",
}


def section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    lines = page.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return ""
    out = []
    for line in lines[start + 1:]:
        m = re.match(r"^(#+) ", line)
        if m and len(m.group(1)) <= len(level):
            break
        out.append(line)
    return "\n".join(out)


def documented(name: str, text: str) -> bool:
    """A key is documented when it appears as `name` or as a YAML/JSON key in the text."""
    return bool(re.search(rf"`{re.escape(name)}`|(?<![\w.]){re.escape(name)}:|\"{re.escape(name)}\":", text))


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation (``list[X]``, ``X | None``, ``dict[str, X]``…)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in nested_models(arg)]


def undocumented(model: type[BaseModel], page: str, sections: dict[type, str], heading: str | None = None,
                 seen: set | None = None) -> list[str]:
    """``Model.key`` for every key of ``model`` (and of the models it nests) that its section of
    ``page`` does not document."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    heading = sections.get(model, heading)
    text = section(page, heading) if heading else page
    missing = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if not documented(key, text):
            missing.append(f"{model.__name__}.{key} (under {heading!r})")
        for inner in nested_models(field.annotation):
            missing += undocumented(inner, page, sections, heading, seen)
    return missing


@pytest.mark.parametrize("model", [ProjectConfig, ReleaseConfig, CaseModel], ids=lambda m: m.__name__)
def test_every_key_is_documented(model):
    assert undocumented(model, PAGE, SECTIONS) == []


def test_every_evaluator_type_and_option_is_documented():
    evaluators = section(PAGE, "## Evaluators")
    for type_name, cls in sorted(registry().items()):
        heading = f"### `{type_name}`"
        assert heading in evaluators.splitlines(), f"evaluator type {type_name!r} has no section"
        cls.config_model.model_rebuild()
        missing = undocumented(cls.config_model, PAGE, {cls.config_model: heading})
        # what every evaluator takes (EvaluatorConfig's `when`) is documented once, before the types
        assert [m for m in missing if not m.startswith(f"{cls.config_model.__name__}.when ")
                and not m.startswith("When.")] == [], type_name
    intro = evaluators.split("### `", 1)[0]
    for selector in ("when", "ids", "tags", "metadata.KEY", "not_selected"):
        assert f"`{selector}" in intro, selector


def test_label_files_exit_codes_and_links():
    labels = section(PAGE, "## Label files")
    assert documented("case_id", labels) and documented("valid", labels)
    codes = section(PAGE, "## Exit codes")
    for code in ("0", "1", "2", "3", "130"):
        assert re.search(rf"^\| {code} \|", codes, re.MULTILINE), code
    assert "(input-limits.md)" in PAGE
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    docs_list = section(readme, "## Documentation")
    assert "(docs/configuration.md)" in docs_list and "(docs/what-oloproof-cannot-tell-you.md)" in docs_list
    assert (DOCS / "what-oloproof-cannot-tell-you.md").exists()


def test_the_check_catches_an_undocumented_key():
    from pydantic import Field

    class Inner(BaseModel):
        hidden_inner_knob: int = 0
        name: str = ""

    class Outer(BaseModel):
        system: SystemConfig
        evaluators: list[dict[str, Any]] = []
        undocumented_knob: int = 0
        inner: list[Inner] | None = None
        aliased: int = Field(default=0, alias="yaml-only-spelling")

    found = undocumented(Outer, PAGE, {**SECTIONS, Outer: "## `oloproof.yaml`"})
    assert any("Outer.undocumented_knob" in f for f in found)
    assert any("Inner.hidden_inner_knob" in f for f in found)  # found in a nested model too
    assert any("Outer.yaml-only-spelling" in f for f in found)  # by its YAML name
    assert not any(".system " in f or ".evaluators " in f or "Inner.name" in f for f in found)
    # a key documented in another section does not count for this one
    assert undocumented(MetricConfig, "## `release.yaml`\n`id` `type` `source` `quantile`\n",
                        {MetricConfig: "### `metrics`"})
    # an evaluator type missing from the page is caught
    assert "### `no_such_evaluator`" not in section(PAGE, "## Evaluators").splitlines()
