//! Parquet datasets: one row per task version with the eighteen columns.
//!
//! The reader accepts what other writers produce: `string`, `large_string` and
//! `string_view` columns, `list` and `large_list`, list children named `element`
//! or `item`, struct children in any order, nullable fields (a null value is an
//! error naming the row and column). Our writer uses `string`, `int64` and
//! `list<element>` and keeps [`TaskExtras`] in the file's key-value metadata under
//! [`EXTRAS_METADATA_KEY`], so the column set stays exactly the published schema.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::{KeyValue, RowGroupMetaData};
use parquet::file::properties::WriterProperties;

use crate::error::{LoadError, WriteError};
use crate::row::{ColumnType, InstanceRow, RepoFile, COLUMNS};
use crate::safe::MAX_TASK_BYTES;
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

fn str_at(array: &dyn Array, i: usize) -> Option<&str> {
    if array.is_null(i) {
        return None;
    }
    if let Some(a) = array.as_string_opt::<i32>() {
        return Some(a.value(i));
    }
    if let Some(a) = array.as_string_opt::<i64>() {
        return Some(a.value(i));
    }
    array.as_string_view_opt().map(|a| a.value(i))
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
    /// Bytes of values this row may still take (see [`MAX_TASK_BYTES`]).
    budget: Cell<u64>,
}

impl RowReader<'_> {
    /// A value of the row, counted against the row's budget.
    fn take(
        &self,
        name: &str,
        value: Option<&str>,
        null: String,
    ) -> Result<String, (String, String)> {
        let value = value.ok_or_else(|| (name.to_string(), null))?;
        let left = self.budget.get();
        if value.len() as u64 > left {
            return Err((
                name.to_string(),
                format!("the row holds more than {MAX_TASK_BYTES} bytes of values"),
            ));
        }
        self.budget.set(left - value.len() as u64);
        Ok(value.to_string())
    }

    fn column(&self, name: &str) -> &ArrayRef {
        self.batch
            .column_by_name(name)
            .expect("schema was checked before reading rows")
    }

    fn string(&self, name: &str) -> Result<String, (String, String)> {
        self.take(
            name,
            str_at(self.column(name).as_ref(), self.index),
            "null value".to_string(),
        )
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
                self.take(
                    name,
                    str_at(values.as_ref(), i),
                    format!("item {i} is null"),
                )
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
                    path: self.take(
                        name,
                        str_at(path.as_ref(), i),
                        format!("item {i}: null path"),
                    )?,
                    content: self.take(
                        name,
                        str_at(content.as_ref(), i),
                        format!("item {i}: null content"),
                    )?,
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

/// What [`parse_parquet`] read.
#[derive(Debug, Default)]
pub struct ParsedParquet {
    /// The rows that loaded, in file order.
    pub tasks: Vec<Task>,
    /// One error per row or row group that did not load, or one for the file.
    pub errors: Vec<LoadError>,
    /// Things ignored (extras metadata that cannot be read).
    pub warnings: Vec<LoadError>,
}

/// Rows decoded at a time.
const BATCH_ROWS: usize = 16;

/// Runs `f`, turning a panic inside the Parquet or Arrow code into an error.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        format!("the Parquet reader failed ({what})")
    })
}

/// Checks a row group's footer entries before anything of it is read: sizes
/// and offsets that are not negative, column chunks inside the file, and no
/// more decoded bytes than [`MAX_TASK_BYTES`] per row (so a small file cannot
/// expand into gigabytes).
fn check_row_group(rg: &RowGroupMetaData, file_len: u64) -> Result<(), String> {
    let rows = u64::try_from(rg.num_rows()).map_err(|_| format!("{} rows", rg.num_rows()))?;
    let budget = rows.max(1).saturating_mul(MAX_TASK_BYTES);
    let mut decoded: u64 = 0;
    for (i, col) in rg.columns().iter().enumerate() {
        let name = col.column_path().string();
        let start = col
            .dictionary_page_offset()
            .unwrap_or(col.data_page_offset());
        let (Ok(start), Ok(len), Ok(unpacked)) = (
            u64::try_from(start),
            u64::try_from(col.compressed_size()),
            u64::try_from(col.uncompressed_size()),
        ) else {
            return Err(format!(
                "column chunk {i} (`{name}`) has a negative offset or size"
            ));
        };
        let data_start = u64::try_from(col.data_page_offset()).unwrap_or(u64::MAX);
        if data_start >= file_len {
            return Err(format!(
                "column chunk {i} (`{name}`) has its data page offset {} outside the file",
                col.data_page_offset()
            ));
        }
        if start.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(format!(
                "column chunk {i} (`{name}`) lies outside the file ({len} bytes at offset {start} of {file_len})"
            ));
        }
        decoded = decoded.saturating_add(unpacked);
    }
    if decoded > budget {
        return Err(format!(
            "{decoded} bytes once decoded for {rows} rows; a row may hold at most {MAX_TASK_BYTES}"
        ));
    }
    Ok(())
}

/// Reads a Parquet dataset from bytes. A schema problem or a corrupt footer is
/// one error for the whole source; a bad row group or row is an error of its
/// own (naming the row group or row) and the others still load. Footer entries
/// are checked before a row group is read, decoded bytes are bounded per row
/// ([`MAX_TASK_BYTES`]), and a panic inside the Parquet reader is an error,
/// never a crash.
pub fn parse_parquet(bytes: Vec<u8>, source: &str) -> ParsedParquet {
    let fail = |m: String| ParsedParquet {
        errors: vec![LoadError::source(source, m)],
        ..ParsedParquet::default()
    };
    let file_len = bytes.len() as u64;
    let bytes = bytes::Bytes::from(bytes);
    let metadata = match guarded(|| ArrowReaderMetadata::load(&bytes, Default::default())) {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return fail(format!("not a readable Parquet file: {e}")),
        Err(e) => return fail(format!("not a readable Parquet file: {e}")),
    };
    let mut parsed = ParsedParquet::default();
    let extras: BTreeMap<String, TaskExtras> = match metadata
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == EXTRAS_METADATA_KEY))
    {
        None => BTreeMap::new(),
        Some(kv) => match kv.value.as_deref().map(serde_json::from_str) {
            Some(Ok(map)) => map,
            Some(Err(e)) => {
                parsed.warnings.push(
                    LoadError::source(
                        source,
                        format!("not a JSON object of task extras ({e}); ignored, so no task has a ladder or limits"),
                    )
                    .in_field(EXTRAS_METADATA_KEY),
                );
                BTreeMap::new()
            }
            None => {
                parsed.warnings.push(
                    LoadError::source(source, "has no value; ignored")
                        .in_field(EXTRAS_METADATA_KEY),
                );
                BTreeMap::new()
            }
        },
    };
    let schema = metadata.schema().clone();
    for (column, expected) in COLUMNS {
        match schema.field_with_name(column) {
            Err(_) => parsed.errors.push(
                LoadError::source(source, "missing column (no row can be read)").in_field(column),
            ),
            Ok(field) if !type_matches(expected, field.data_type()) => parsed.errors.push(
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
    if !parsed.errors.is_empty() {
        return parsed;
    }
    let mut first_row = 0u64;
    for (group, rg) in metadata.metadata().row_groups().iter().enumerate() {
        let group_name = format!("row group {}", group + 1);
        let rows_here = u64::try_from(rg.num_rows()).unwrap_or(0);
        let rows_before = first_row;
        first_row = first_row.saturating_add(rows_here);
        if let Err(why) = check_row_group(rg, file_len) {
            parsed.errors.push(
                LoadError::source(source, format!("{why}; its rows are not read"))
                    .at_row(group_name),
            );
            continue;
        }
        let read =
            guarded(|| read_row_group(&bytes, &metadata, group, rows_before, source, &extras));
        match read {
            Ok((tasks, errors)) => {
                parsed.tasks.extend(tasks);
                parsed.errors.extend(errors);
            }
            Err(why) => parsed.errors.push(
                LoadError::source(source, format!("{why}; its rows are not read"))
                    .at_row(group_name),
            ),
        }
    }
    parsed
}

/// Reads the rows of one row group.
fn read_row_group(
    bytes: &bytes::Bytes,
    metadata: &ArrowReaderMetadata,
    group: usize,
    rows_before: u64,
    source: &str,
    extras: &BTreeMap<String, TaskExtras>,
) -> (Vec<Task>, Vec<LoadError>) {
    let group_name = format!("row group {}", group + 1);
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    let reader =
        match ParquetRecordBatchReaderBuilder::new_with_metadata(bytes.clone(), metadata.clone())
            .with_row_groups(vec![group])
            .with_batch_size(BATCH_ROWS)
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                errors.push(
                    LoadError::source(source, format!("cannot read rows: {e}")).at_row(group_name),
                );
                return (tasks, errors);
            }
        };
    let mut row_number = rows_before;
    for batch in reader {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                errors.push(
                    LoadError::source(source, format!("corrupt data after row {row_number}: {e}"))
                        .at_row(group_name),
                );
                break;
            }
        };
        for index in 0..batch.num_rows() {
            row_number += 1;
            let reader = RowReader {
                batch: &batch,
                index,
                budget: Cell::new(MAX_TASK_BYTES),
            };
            match reader.row() {
                Ok(row) => {
                    let extras = extras.get(&row.instance_id).cloned().unwrap_or_default();
                    tasks.push(Task { row, extras });
                }
                Err((field, message)) => {
                    reader.budget.set(MAX_TASK_BYTES);
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
    use std::io::Write;
    // Replaced, never written through a link at its path.
    let mut file =
        pdl_fs::open_file_nofollow(path, pdl_fs::OpenMode::Truncate).map_err(WriteError::fs)?;
    file.write_all(&bytes).map_err(|e| WriteError::io(path, e))
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
        let parsed = parse_parquet(bytes, "x.parquet");
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        assert_eq!(parsed.tasks, tasks);
    }

    #[test]
    fn truncated_and_garbage_files_are_named() {
        let bytes = parquet_bytes(&[task("a")]).unwrap();
        let parsed = parse_parquet(bytes[..bytes.len() / 2].to_vec(), "cut.parquet");
        assert!(parsed.tasks.is_empty());
        assert!(parsed.errors[0]
            .to_string()
            .starts_with("cut.parquet: not a readable Parquet file"));
        let parsed = parse_parquet(b"hello".to_vec(), "g.parquet");
        assert_eq!(parsed.errors.len(), 1);
    }

    /// One row group per task, written with `compression`.
    fn file_with(tasks: &[Task], compression: Compression) -> Vec<u8> {
        let batch = build_batch(tasks).unwrap();
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(1))
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    #[test]
    fn a_negative_size_in_the_footer_costs_only_its_row_group() {
        use parquet::file::metadata::ParquetMetaDataWriter;
        let bytes = file_with(&[task("a"), task("b")], Compression::SNAPPY);
        let meta =
            ArrowReaderMetadata::load(&bytes::Bytes::from(bytes.clone()), Default::default())
                .unwrap();
        let footer_len =
            u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap())
                as usize;
        let data = &bytes[..bytes.len() - 8 - footer_len];
        let mut builder = meta.metadata().as_ref().clone().into_builder();
        let mut groups = builder.take_row_groups();
        let mut columns = groups[1].columns().to_vec();
        columns[0] = columns[0]
            .clone()
            .into_builder()
            .set_total_compressed_size(-1)
            .build()
            .unwrap();
        groups[1] = groups[1]
            .clone()
            .into_builder()
            .set_column_metadata(columns)
            .build()
            .unwrap();
        let edited = builder.set_row_groups(groups).build();
        let mut out = data.to_vec();
        ParquetMetaDataWriter::new(&mut out, &edited)
            .finish()
            .unwrap();
        let parsed = parse_parquet(out, "neg.parquet");
        assert_eq!(parsed.tasks.len(), 1, "{:?}", parsed.errors);
        assert_eq!(parsed.tasks[0].row.task_id, "a");
        assert_eq!(parsed.errors.len(), 1);
        let shown = parsed.errors[0].to_string();
        assert!(
            shown.starts_with("neg.parquet: row group 2: column chunk 0 (`instance_id`) has a negative offset or size"),
            "{shown}"
        );
    }

    #[test]
    fn a_decompression_bomb_is_refused_before_decoding() {
        let mut bomb = task("bomb");
        bomb.row.problem_statement = "A".repeat(70 << 20);
        let bytes = file_with(&[bomb, task("good")], Compression::ZSTD(Default::default()));
        assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
        let parsed = parse_parquet(bytes, "bomb.parquet");
        assert_eq!(parsed.tasks.len(), 1, "{:?}", parsed.errors);
        assert_eq!(parsed.tasks[0].row.task_id, "good");
        let shown = parsed.errors[0].to_string();
        assert!(shown.starts_with("bomb.parquet: row group 1: "), "{shown}");
        assert!(shown.contains("a row may hold at most 67108864"), "{shown}");
    }

    #[test]
    fn garbage_extras_metadata_is_a_warning() {
        let bytes = file_with(&[task("a")], Compression::SNAPPY);
        let meta =
            ArrowReaderMetadata::load(&bytes::Bytes::from(bytes.clone()), Default::default())
                .unwrap();
        let footer_len =
            u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap())
                as usize;
        let mut out = bytes[..bytes.len() - 8 - footer_len].to_vec();
        let mut kv = meta
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .cloned()
            .unwrap_or_default();
        kv.push(KeyValue::new(
            EXTRAS_METADATA_KEY.to_string(),
            "[[[not extras".to_string(),
        ));
        let fm = meta.metadata().file_metadata();
        let file_meta = parquet::file::metadata::FileMetaData::new(
            fm.version(),
            fm.num_rows(),
            fm.created_by().map(str::to_string),
            Some(kv),
            fm.schema_descr_ptr(),
            None,
        );
        let edited = parquet::file::metadata::ParquetMetaDataBuilder::new(file_meta)
            .set_row_groups(meta.metadata().row_groups().to_vec())
            .build();
        parquet::file::metadata::ParquetMetaDataWriter::new(&mut out, &edited)
            .finish()
            .unwrap();
        let parsed = parse_parquet(out, "x.parquet");
        assert_eq!(parsed.tasks.len(), 1, "{:?}", parsed.errors);
        assert_eq!(parsed.warnings.len(), 1);
        assert!(
            parsed.warnings[0]
                .to_string()
                .contains("`pdl_swe.extras`: not a JSON object of task extras"),
            "{}",
            parsed.warnings[0]
        );
    }
}
