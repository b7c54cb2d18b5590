"""Standard JSON for the benchmarks' results files.

Python's ``json`` writes a non-finite float as ``NaN``, ``Infinity`` or ``-Infinity`` by default: tokens that
standard JSON (RFC 8259) has not, so strict readers (jq, JavaScript's ``JSON.parse``, many dashboards) refuse
the whole file. Here:

* a number that is non-finite by meaning (a loss that diverged, the infinite difference a NaN loss makes) is
  written as the string ``"nan"``, ``"inf"`` or ``"-inf"`` (:func:`finite_or_text`; Python's ``float()`` reads
  each back), at the keys the benchmark names (:func:`nonfinite_as_text`);
* any other non-finite number fails in :func:`write_json` (``allow_nan=False``), naming where it stands in the
  record, instead of leaving a file that strict readers refuse.
"""

import json
import math
from pathlib import Path
from typing import Any, Callable, Collection, Optional, Union

#: what :func:`finite_or_text` writes for a non-finite float; ``float()`` reads each back
NONFINITE_TEXT = ("nan", "inf", "-inf")


def finite_or_text(value: Any) -> Any:
    """``value`` itself, or for a non-finite float its string: ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _all_as_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _all_as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_all_as_text(v) for v in value]
    return finite_or_text(value)


def nonfinite_as_text(record: Any, keys: Collection[str]) -> Any:
    """A copy of ``record`` (dicts and lists, nested) in which every non-finite float at a dict key in ``keys``,
    or anywhere below one, is :func:`finite_or_text`'s string; every other value as it was (``record`` itself is
    not changed). The keys name the values that may be non-finite by meaning: only there is one not an error."""
    if isinstance(record, dict):
        return {k: (_all_as_text(v) if k in keys else nonfinite_as_text(v, keys)) for k, v in record.items()}
    if isinstance(record, (list, tuple)):
        return [nonfinite_as_text(v, keys) for v in record]
    return record


def first_nonfinite(record: Any, where: str = "") -> Optional[str]:
    """Where the first non-finite float of ``record`` stands (``rows[0].backends.fused.tokens_per_s``), or None."""
    if isinstance(record, float) and not math.isfinite(record):
        return where or "the value"
    items = record.items() if isinstance(record, dict) else enumerate(record) if isinstance(record, (list, tuple)) else ()
    for key, value in items:
        found = first_nonfinite(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def dumps(record: Any, indent: Optional[int] = None, default: Optional[Callable[[Any], Any]] = None) -> str:
    """``record`` as standard JSON text; ValueError naming the place of a non-finite number in it (write those
    a benchmark means with :func:`nonfinite_as_text`)."""
    try:
        return json.dumps(record, indent=indent, default=default, allow_nan=False)
    except ValueError as err:
        where = first_nonfinite(record)
        if where is None:
            raise
        raise ValueError(f"{where} is not a finite number, which standard JSON cannot hold: write it with "
                         "benchmarks.results_json.nonfinite_as_text, or find why it is not finite") from err


def write_json(path: Union[str, Path], record: Any, indent: Optional[int] = 2,
               default: Optional[Callable[[Any], Any]] = None) -> None:
    """Write ``record`` to ``path`` as standard JSON (:func:`dumps`), UTF-8, ending in a newline. Nothing is
    written when a number in it is not finite."""
    text = dumps(record, indent=indent, default=default)
    Path(path).write_text(text + "\n", encoding="utf-8")
