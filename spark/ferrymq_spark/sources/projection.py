"""A user schema as a projection of a store data source's own schema.

pyspark's Python data sources get no column pruning from the optimizer: ``reader(schema)`` is
handed the user's schema (``spark.read.format(...).schema("a long, b string")``) or the source's
own, and the batches must match it. The store sources treat a user schema as the list of columns
to produce, in the user's order; anything that is not such a list is refused here, at planning,
so the user sees the reason before any task runs.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, IntegerType, LongType, StringType, StructType

_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "long": LongType(),
    "array<string>": ArrayType(StringType(), True),
}


class SchemaProjectionError(ValueError):
    """A user schema that is not a projection of the source's schema; the message says why."""


def column_types(ddl: str) -> dict[str, DataType]:
    """Column name -> Spark type of a source's DDL schema (``"a long, b string"``), in order."""
    pairs = (c.strip().split(" ", 1) for c in ddl.split(","))
    return {name: _SPARK_TYPES[kind] for name, kind in pairs}


def projected_columns(fmt: str, ddl: str, schema: StructType | None) -> list[str]:
    """The column names of ``schema``, checked to be a subset of ``ddl`` with the same types.

    None means the source's full schema. Unknown names (listing the real ones), another type,
    a repeated name and NOT NULL are all reported in one error.
    """
    types = column_types(ddl)
    if schema is None:
        return list(types)
    names = [f.name for f in schema.fields]
    problems = []
    unknown = [n for n in names if n not in types]
    if unknown:
        problems.append(
            f"unknown column(s) {', '.join(unknown)} (the columns are {', '.join(types)})"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"column(s) {', '.join(repeated)} named more than once")
    for f in schema.fields:
        expected = types.get(f.name)
        if expected is not None and f.dataType != expected:
            problems.append(
                f"column {f.name} is {expected.simpleString()}, not {f.dataType.simpleString()}"
            )
        if not f.nullable:
            # the sources declare every column nullable; Spark would reject the batches later
            problems.append(f"column {f.name} must be nullable (drop NOT NULL)")
    if problems:
        raise SchemaProjectionError(f"{fmt}: bad schema: " + "; ".join(problems))
    return names
