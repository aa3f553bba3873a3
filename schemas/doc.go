// Package schemas defines the Arrow schema of every table in a run directory
// (prompts, rollouts, pairs, rubrics, judgments, steps, dedup_report), with a
// typed Go row struct and codec for each, and the rubric JSON format with its
// R_format validator (README.md, "The method").
//
// Each table is a *Table[Row]: Schema() carries the table name and schema
// version in its metadata (evolm.table, evolm.schema_version); Build and
// NewBuilder turn rows into record batches; Read checks a batch's schema
// (every column present with a compatible type, else an error naming the
// column and the expected type, showing both schemas) and decodes it,
// rejecting nulls in non-nullable columns and invalid UTF-8 with the column
// and row. Nested data uses Arrow types: chat messages are
// list<struct<role, content>>, criteria list<struct<criterion, weight>>.
//
// A schema change that readers of old shards cannot follow bumps the table's
// Version.
package schemas
