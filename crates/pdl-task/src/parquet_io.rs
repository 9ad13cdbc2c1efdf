//! Parquet datasets: one row per task version with the eighteen columns.
//!
//! The reader accepts what other writers produce: `string`, `large_string` and
//! `string_view` columns, `list` and `large_list`, list children named `element`
//! or `item`, struct children in any order, nullable fields (a null value is an
//! error naming the row and column). Our writer uses `string`, `int64` and
//! `list<element>` and keeps [`TaskExtras`] in the file's key-value metadata under
//! [`EXTRAS_METADATA_KEY`], so the column set stays exactly the published schema.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::error::{LoadError, WriteError};
use crate::row::{ColumnType, InstanceRow, RepoFile, COLUMNS};
use crate::task::{Task, TaskExtras};

/// The key-value metadata key holding `{instance_id: extras}` as JSON.
pub const EXTRAS_METADATA_KEY: &str = "pdl_swe.extras";

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn list_child(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) => Some(f.data_type()),
        _ => None,
    }
}

fn type_matches(expected: ColumnType, t: &DataType) -> bool {
    match expected {
        ColumnType::String => is_string(t),
        ColumnType::Int64 => *t == DataType::Int64,
        ColumnType::StringList => list_child(t).is_some_and(is_string),
        ColumnType::FileList => match list_child(t) {
            Some(DataType::Struct(fields)) => ["path", "content"].iter().all(|name| {
                fields
                    .iter()
                    .any(|f| f.name() == name && is_string(f.data_type()))
            }),
            _ => false,
        },
    }
}

fn string_at(array: &dyn Array, i: usize) -> Option<String> {
    if array.is_null(i) {
        return None;
    }
    if let Some(a) = array.as_string_opt::<i32>() {
        return Some(a.value(i).to_string());
    }
    if let Some(a) = array.as_string_opt::<i64>() {
        return Some(a.value(i).to_string());
    }
    array.as_string_view_opt().map(|a| a.value(i).to_string())
}

fn list_at(array: &dyn Array, i: usize) -> Option<ArrayRef> {
    if array.is_null(i) {
        return None;
    }
    if let Some(a) = array.as_list_opt::<i32>() {
        return Some(a.value(i));
    }
    array.as_list_opt::<i64>().map(|a| a.value(i))
}

struct RowReader<'a> {
    batch: &'a RecordBatch,
    index: usize,
}

impl RowReader<'_> {
    fn column(&self, name: &str) -> &ArrayRef {
        self.batch
            .column_by_name(name)
            .expect("schema was checked before reading rows")
    }

    fn string(&self, name: &str) -> Result<String, (String, String)> {
        string_at(self.column(name).as_ref(), self.index)
            .ok_or_else(|| (name.to_string(), "null value".to_string()))
    }

    fn int(&self, name: &str) -> Result<i64, (String, String)> {
        let col = self.column(name);
        if col.is_null(self.index) {
            return Err((name.to_string(), "null value".to_string()));
        }
        Ok(col.as_primitive::<Int64Type>().value(self.index))
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, (String, String)> {
        let values = list_at(self.column(name).as_ref(), self.index)
            .ok_or_else(|| (name.to_string(), "null value".to_string()))?;
        (0..values.len())
            .map(|i| {
                string_at(values.as_ref(), i)
                    .ok_or_else(|| (name.to_string(), format!("item {i} is null")))
            })
            .collect()
    }

    fn files(&self) -> Result<Vec<RepoFile>, (String, String)> {
        let name = "files";
        let values = list_at(self.column(name).as_ref(), self.index)
            .ok_or_else(|| (name.to_string(), "null value".to_string()))?;
        let structs = values.as_struct();
        let path = structs.column_by_name("path").expect("schema checked");
        let content = structs.column_by_name("content").expect("schema checked");
        (0..structs.len())
            .map(|i| {
                if structs.is_null(i) {
                    return Err((name.to_string(), format!("item {i} is null")));
                }
                Ok(RepoFile {
                    path: string_at(path.as_ref(), i)
                        .ok_or_else(|| (name.to_string(), format!("item {i}: null path")))?,
                    content: string_at(content.as_ref(), i)
                        .ok_or_else(|| (name.to_string(), format!("item {i}: null content")))?,
                })
            })
            .collect()
    }

    fn row(&self) -> Result<InstanceRow, (String, String)> {
        Ok(InstanceRow {
            instance_id: self.string("instance_id")?,
            task_id: self.string("task_id")?,
            task_version: self.int("task_version")?,
            tier: self.string("tier")?,
            domain: self.string("domain")?,
            problem_statement: self.string("problem_statement")?,
            patch: self.string("patch")?,
            test_patch: self.string("test_patch")?,
            fail_to_pass: self.strings("FAIL_TO_PASS")?,
            pass_to_pass: self.strings("PASS_TO_PASS")?,
            files: self.files()?,
            patch_policy_allowed: self.strings("patch_policy_allowed")?,
            patch_policy_forbidden: self.strings("patch_policy_forbidden")?,
            token_budget: self.int("token_budget")?,
            hidden_test_count: self.int("hidden_test_count")?,
            public_test_count: self.int("public_test_count")?,
            graded_ladder_rungs: self.strings("graded_ladder_rungs")?,
            reward_formula: self.string("reward_formula")?,
        })
    }
}

/// Reads a Parquet dataset from bytes. A schema problem or a corrupt file is one
/// error for the whole source; a bad row is an error of its own and the other rows
/// still load.
pub fn parse_parquet(bytes: Vec<u8>, source: &str) -> (Vec<Task>, Vec<LoadError>) {
    let fail = |m: String| (Vec::new(), vec![LoadError::source(source, m)]);
    let builder = match ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes)) {
        Ok(b) => b,
        Err(e) => return fail(format!("not a readable Parquet file: {e}")),
    };
    let extras: BTreeMap<String, TaskExtras> = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == EXTRAS_METADATA_KEY))
        .and_then(|kv| kv.value.as_deref())
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    let schema = builder.schema().clone();
    let mut schema_errors = Vec::new();
    for (column, expected) in COLUMNS {
        match schema.field_with_name(column) {
            Err(_) => schema_errors.push(
                LoadError::source(source, "missing column (no row can be read)").in_field(column),
            ),
            Ok(field) if !type_matches(expected, field.data_type()) => schema_errors.push(
                LoadError::source(
                    source,
                    format!(
                        "expected {}, found {} (no row can be read)",
                        expected.describe(),
                        field.data_type()
                    ),
                )
                .in_field(column),
            ),
            Ok(_) => {}
        }
    }
    if !schema_errors.is_empty() {
        return (Vec::new(), schema_errors);
    }
    let reader = match builder.build() {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot read rows: {e}")),
    };
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    let mut row_number = 0usize;
    for batch in reader {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                errors.push(LoadError::source(
                    source,
                    format!("corrupt data after row {row_number}: {e}"),
                ));
                break;
            }
        };
        for index in 0..batch.num_rows() {
            row_number += 1;
            let reader = RowReader {
                batch: &batch,
                index,
            };
            match reader.row() {
                Ok(row) => {
                    let extras = extras.get(&row.instance_id).cloned().unwrap_or_default();
                    tasks.push(Task { row, extras });
                }
                Err((field, message)) => {
                    let id = reader.string("instance_id").ok();
                    errors.push(
                        LoadError::source(source, message)
                            .at_row(format!("row {row_number}"))
                            .for_instance(id.as_deref())
                            .in_field(field),
                    );
                }
            }
        }
    }
    (tasks, errors)
}

fn string_list_field(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("element", DataType::Utf8, false))),
        false,
    )
}

fn file_struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("content", DataType::Utf8, false),
    ])
}

/// The Arrow schema our writer uses.
pub fn arrow_schema() -> Schema {
    let fields: Vec<Field> = COLUMNS
        .iter()
        .map(|(name, t)| match t {
            ColumnType::String => Field::new(*name, DataType::Utf8, false),
            ColumnType::Int64 => Field::new(*name, DataType::Int64, false),
            ColumnType::StringList => string_list_field(name),
            ColumnType::FileList => Field::new(
                *name,
                DataType::List(Arc::new(Field::new(
                    "element",
                    DataType::Struct(file_struct_fields()),
                    false,
                ))),
                false,
            ),
        })
        .collect();
    Schema::new(fields)
}

fn build_batch(tasks: &[Task]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = Arc::new(arrow_schema());
    let rows: Vec<&InstanceRow> = tasks.iter().map(|t| &t.row).collect();
    let strings = |f: fn(&InstanceRow) -> &str| -> ArrayRef {
        let mut b = StringBuilder::new();
        for r in &rows {
            b.append_value(f(r));
        }
        Arc::new(b.finish())
    };
    let ints = |f: fn(&InstanceRow) -> i64| -> ArrayRef {
        let mut b = Int64Builder::new();
        for r in &rows {
            b.append_value(f(r));
        }
        Arc::new(b.finish())
    };
    let lists = |f: fn(&InstanceRow) -> &Vec<String>| -> ArrayRef {
        let mut b = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new(
            "element",
            DataType::Utf8,
            false,
        )));
        for r in &rows {
            for s in f(r) {
                b.values().append_value(s);
            }
            b.append(true);
        }
        Arc::new(b.finish())
    };
    let files: ArrayRef = {
        let mut b = ListBuilder::new(StructBuilder::from_fields(file_struct_fields(), 0))
            .with_field(Arc::new(Field::new(
                "element",
                DataType::Struct(file_struct_fields()),
                false,
            )));
        for r in &rows {
            for file in &r.files {
                let s = b.values();
                s.field_builder::<StringBuilder>(0)
                    .expect("path builder")
                    .append_value(&file.path);
                s.field_builder::<StringBuilder>(1)
                    .expect("content builder")
                    .append_value(&file.content);
                s.append(true);
            }
            b.append(true);
        }
        Arc::new(b.finish())
    };
    let columns: Vec<ArrayRef> = vec![
        strings(|r| &r.instance_id),
        strings(|r| &r.task_id),
        ints(|r| r.task_version),
        strings(|r| &r.tier),
        strings(|r| &r.domain),
        strings(|r| &r.problem_statement),
        strings(|r| &r.patch),
        strings(|r| &r.test_patch),
        lists(|r| &r.fail_to_pass),
        lists(|r| &r.pass_to_pass),
        files,
        lists(|r| &r.patch_policy_allowed),
        lists(|r| &r.patch_policy_forbidden),
        ints(|r| r.token_budget),
        ints(|r| r.hidden_test_count),
        ints(|r| r.public_test_count),
        lists(|r| &r.graded_ladder_rungs),
        strings(|r| &r.reward_formula),
    ];
    RecordBatch::try_new(schema, columns)
}

/// Serializes tasks as a Parquet file (snappy-compressed).
pub fn parquet_bytes(tasks: &[Task]) -> Result<Vec<u8>, String> {
    let batch = build_batch(tasks).map_err(|e| e.to_string())?;
    let extras: BTreeMap<&str, &TaskExtras> = tasks
        .iter()
        .filter(|t| !t.extras.is_empty())
        .map(|t| (t.row.instance_id.as_str(), &t.extras))
        .collect();
    let mut props = WriterProperties::builder().set_compression(Compression::SNAPPY);
    if !extras.is_empty() {
        props = props.set_key_value_metadata(Some(vec![KeyValue::new(
            EXTRAS_METADATA_KEY.to_string(),
            serde_json::to_string(&extras).expect("extras always serialize"),
        )]));
    }
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props.build()))
        .map_err(|e| e.to_string())?;
    writer.write(&batch).map_err(|e| e.to_string())?;
    writer.close().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Writes tasks as a Parquet file.
pub fn write_parquet(tasks: &[Task], path: &Path) -> Result<(), WriteError> {
    let bytes = parquet_bytes(tasks).map_err(|message| WriteError::Format {
        path: path.to_path_buf(),
        message,
    })?;
    std::fs::write(path, bytes).map_err(|e| WriteError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str) -> Task {
        Task {
            row: InstanceRow {
                instance_id: format!("{id}-v1"),
                task_id: id.into(),
                task_version: 1,
                tier: "T1".into(),
                domain: "d".into(),
                problem_statement: "p\nq".into(),
                patch: "".into(),
                test_patch: "".into(),
                fail_to_pass: vec!["a::b".into()],
                pass_to_pass: vec![],
                files: vec![RepoFile {
                    path: "a.py".into(),
                    content: "é\n".into(),
                }],
                patch_policy_allowed: vec!["src/**".into()],
                patch_policy_forbidden: vec![],
                token_budget: 7,
                hidden_test_count: 1,
                public_test_count: 0,
                graded_ladder_rungs: vec![],
                reward_formula: "1*build_health".into(),
            },
            extras: TaskExtras::default(),
        }
    }

    #[test]
    fn round_trip_with_extras() {
        let mut a = task("a");
        a.extras.limits.test_timeout_s = Some(9);
        let tasks = vec![a, task("b")];
        let bytes = parquet_bytes(&tasks).unwrap();
        let (back, errors) = parse_parquet(bytes, "x.parquet");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(back, tasks);
    }

    #[test]
    fn truncated_and_garbage_files_are_named() {
        let bytes = parquet_bytes(&[task("a")]).unwrap();
        let (tasks, errors) = parse_parquet(bytes[..bytes.len() / 2].to_vec(), "cut.parquet");
        assert!(tasks.is_empty());
        assert!(errors[0]
            .to_string()
            .starts_with("cut.parquet: not a readable Parquet file"));
        let (_, errors) = parse_parquet(b"hello".to_vec(), "g.parquet");
        assert_eq!(errors.len(), 1);
    }
}
