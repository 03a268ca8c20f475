"""JSONL cases are validated before anything runs; errors name file, line, case and field."""

import pytest

from oloproof.config.cases import CaseFile
from oloproof.errors import CaseFileError
from tests.conftest import write

OK = '{"id": "a", "input": {"q": 1}, "expected": {"tools": ["t"]}}\n'


def error_of(tmp_path, text):
    path = write(tmp_path / "cases.jsonl", text)
    with pytest.raises(CaseFileError) as e:
        CaseFile(path).validate()
    return str(e.value)


def test_valid_file(tmp_path):
    path = write(tmp_path / "cases.jsonl", OK + "\n" + OK.replace('"a"', '"b"'))
    info = CaseFile(path).validate()
    assert info.count == 2
    assert [c.line for c in CaseFile(path)] == [1, 3]


def test_malformed_json(tmp_path):
    msg = error_of(tmp_path, OK + '{"id": "b", "input": \n')
    assert "cases.jsonl:2" in msg and "malformed JSON" in msg


def test_duplicate_ids(tmp_path):
    msg = error_of(tmp_path, OK + OK)
    assert "cases.jsonl:2" in msg and "case 'a'" in msg and "duplicate id" in msg and "line 1" in msg


def test_expected_tools_not_a_list(tmp_path):
    msg = error_of(tmp_path, OK + '{"id": "b", "input": {}, "expected": {"tools": "lookup"}}\n')
    assert "cases.jsonl:2" in msg and "case 'b'" in msg and "'expected.tools'" in msg
    msg = error_of(tmp_path, '{"id": "b", "input": {}, "expected": {"tools": [1, 2]}}\n')
    assert "must be a list of tool names" in msg


def test_tilde_is_reserved(tmp_path):
    msg = error_of(tmp_path, '{"id": "a~injected", "input": {}}\n')
    assert "cases.jsonl:1" in msg and "field 'id'" in msg and "reserved" in msg


def test_missing_and_unknown_fields(tmp_path):
    msg = error_of(tmp_path, '{"id": "a"}\n')
    assert "case 'a'" in msg and "field 'input'" in msg
    msg = error_of(tmp_path, '{"id": "a", "input": {}, "expectd": {}}\n')
    assert "field 'expectd'" in msg and "did you mean 'expected'" in msg
    msg = error_of(tmp_path, '{"id": "a", "input": {}, "initial_state": [1]}\n')
    assert "field 'initial_state'" in msg


def test_not_an_object_and_empty(tmp_path):
    assert "must be a JSON object" in error_of(tmp_path, "[1, 2]\n")
    assert "no cases" in error_of(tmp_path, "\n\n")


def test_fingerprint_covers_input_state_expected_only(tmp_path):
    path = write(tmp_path / "cases.jsonl",
                 '{"id": "a", "input": {"q": 1, "r": 2}, "metadata": {"m": 1}}\n'
                 '{"id": "b", "input": {"r": 2, "q": 1}, "metadata": {"m": 2}}\n'
                 '{"id": "c", "input": {"q": 1, "r": 2}, "initial_state": {"x": 1}}\n')
    a, b, c = CaseFile(path)
    assert a.fingerprint == b.fingerprint != c.fingerprint
