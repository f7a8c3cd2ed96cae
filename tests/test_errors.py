"""hlo_tools.errors holds every public error type of the package."""

import ast
import pathlib

import pytest

import hlo_tools
from hlo_tools import errors
from hlo_tools.hlo.shape import parse_shape

PACKAGE = pathlib.Path(hlo_tools.__file__).parent


def _exception_classes(path):
  tree = ast.parse(path.read_text(), str(path))
  for node in ast.walk(tree):
    if isinstance(node, ast.ClassDef):
      bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
      if any(b.endswith(("Error", "Exception")) for b in bases):
        yield node.name


def test_no_public_error_type_outside_errors_py():
  outside = {
    f"{path.relative_to(PACKAGE)}:{name}"
    for path in PACKAGE.rglob("*.py")
    if path.name != "errors.py"
    for name in _exception_classes(path)
    if not name.startswith("_")
  }
  assert not outside


def test_errors_py_lists_each_of_its_types():
  doc = errors.__doc__
  for name in _exception_classes(PACKAGE / "errors.py"):
    assert f"    {name} " in doc, name


def test_a_bad_shape_is_a_shape_error_with_its_offset():
  with pytest.raises(errors.ShapeError) as e:
    parse_shape("f32[2,x]")
  assert e.value.offset > 0
