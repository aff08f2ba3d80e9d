//! The column of a dataset whose config names none: `text` when the dataset has it, else a column of
//! token-id lists named `input_ids` or `tokens`, read as pretokenized (as SAELens reads such datasets).
//! The first data file decides.
use super::files::{open_lines, DataFile, Field, FileKind};
use super::open::DEFAULT_TEXT_COLUMN;
use crate::error::{Error, Result};
use std::io::BufRead;

/// Columns of token-id lists read without a `token_column`, in order of preference.
pub const TOKEN_COLUMNS: &[&str] = &["input_ids", "tokens"];

/// The token column `files` are read from when no column is set: the first data file has no `text`
/// column but one of [`TOKEN_COLUMNS`] (and no file is .txt); None otherwise (text, whose errors
/// then name `text`).
pub(super) fn token_column(dataset: &str, files: &[DataFile]) -> Result<Option<String>> {
    let Some(first) = files.first() else {
        return Ok(None);
    };
    if files.iter().any(|f| f.kind == FileKind::Text) {
        return Ok(None);
    }
    let columns: Vec<(String, bool)> = match first.kind {
        FileKind::Text => return Ok(None),
        FileKind::Parquet => super::parquet::columns(dataset, &first.path)?,
        FileKind::Jsonl(c) => first_record_fields(&first.path, c)?,
    };
    if columns.iter().any(|(name, _)| name == DEFAULT_TEXT_COLUMN) {
        return Ok(None);
    }
    Ok(TOKEN_COLUMNS
        .iter()
        .find(|want| columns.iter().any(|(name, ids)| name == *want && *ids))
        .map(|c| c.to_string()))
}

/// The fields of a JSONL file's first record and whether each is a list of integers; none when the
/// first non-empty line is not a JSON object (reading it reports that, with its line).
fn first_record_fields(
    path: &std::path::Path,
    compression: super::files::Compression,
) -> Result<Vec<(String, bool)>> {
    let mut lines = open_lines(path, compression)?;
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).map_err(|e| Error::io(path, e))? == 0 {
            return Ok(Vec::new());
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let Ok(serde_json::Value::Object(record)) = serde_json::from_str(&line) else {
        return Ok(Vec::new());
    };
    Ok(record
        .into_iter()
        .map(|(name, value)| {
            let ids = value
                .as_array()
                .is_some_and(|a| a.iter().all(|v| v.is_i64() || v.is_u64()));
            (name, ids)
        })
        .collect())
}

/// The field read when neither column is set: text, or a detected token column (see [`token_column`]).
pub(super) fn default_field(dataset: &str, files: &[DataFile]) -> Result<(Field, bool)> {
    Ok(match token_column(dataset, files)? {
        Some(c) => (Field::Tokens(c), true),
        None => (Field::Text(DEFAULT_TEXT_COLUMN.into()), false),
    })
}
