//! Parquet files written by pyarrow (see `fixtures/make_parquet.py`): the common
//! variants load, and the broken ones are named precisely.

use std::path::PathBuf;

use pdl_task::Dataset;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn pyarrow_variants_load_identically() {
    let reference = Dataset::load(&fixture("pyarrow_default.parquet")).unwrap();
    assert!(reference.errors.is_empty(), "{:?}", reference.errors);
    assert_eq!(reference.tasks.len(), 2);
    let t = &reference.tasks[0].row;
    assert_eq!(t.instance_id, "ext_task_001-v1");
    assert_eq!(t.files[1].path, "conftest.py");
    assert_eq!(t.fail_to_pass, vec!["tests/hidden/test_h.py::test_h"]);
    assert_eq!(reference.tasks[1].row.task_version, 3);
    for variant in ["pyarrow_large.parquet", "pyarrow_item_children.parquet"] {
        let ds = Dataset::load(&fixture(variant)).unwrap();
        assert!(ds.errors.is_empty(), "{variant}: {:?}", ds.errors);
        let rows: Vec<_> = ds.tasks.iter().map(|t| &t.row).collect();
        let expected: Vec<_> = reference.tasks.iter().map(|t| &t.row).collect();
        assert_eq!(rows, expected, "{variant}");
    }
}

#[test]
fn broken_files_name_the_column_and_row() {
    let ds = Dataset::load(&fixture("missing_column.parquet")).unwrap();
    assert!(ds.tasks.is_empty());
    let shown = ds.errors[0].to_string();
    assert!(
        shown.ends_with(
            "missing_column.parquet: `token_budget`: missing column (no row can be read)"
        ),
        "{shown}"
    );

    let ds = Dataset::load(&fixture("wrong_type.parquet")).unwrap();
    let shown = ds.errors[0].to_string();
    assert!(
        shown.contains("`token_budget`: expected int64, found Utf8"),
        "{shown}"
    );

    let ds = Dataset::load(&fixture("null_value.parquet")).unwrap();
    assert_eq!(ds.tasks.len(), 1, "the good row still loads");
    let shown = ds.errors[0].to_string();
    assert!(
        shown.ends_with("null_value.parquet: row 2 (ext_task_002-v3): `domain`: null value"),
        "{shown}"
    );
}
