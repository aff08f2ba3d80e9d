//! Documents from one column of a parquet file, through arrow-rs: only that column is decoded, a
//! batch of rows at a time (within a row group).
use super::files::{Field, Payload};
use crate::error::{Error, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, OffsetSizeTrait};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use std::path::{Path, PathBuf};

/// Rows decoded per batch.
const ROWS_PER_BATCH: usize = 1024;

pub struct ParquetDocuments {
    dataset: String,
    path: PathBuf,
    field: Field,
    reader: ParquetRecordBatchReader,
    /// Index of the next row in the file.
    row: u64,
}

impl ParquetDocuments {
    pub fn open(dataset: &str, path: &Path, field: &Field) -> Result<Self> {
        let err = |column: Option<&str>, message: String| Error::Dataset {
            dataset: dataset.to_string(),
            file: path.to_path_buf(),
            column: column.map(str::to_string),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| err(None, format!("unreadable parquet: {e}")))?;
        let column = field.name();
        let schema = builder.schema().clone();
        let index = schema.index_of(column).map_err(|_| {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            err(
                Some(column),
                format!("no such column (the file has: {})", names.join(", ")),
            )
        })?;
        let dtype = schema.field(index).data_type();
        let fits = match field {
            Field::Text(_) => is_text(dtype),
            Field::Tokens(_) => is_token_list(dtype),
        };
        if !fits {
            let want = match field {
                Field::Text(_) => {
                    "a string column (set `text_column`, or `token_column` for token ids)"
                }
                Field::Tokens(_) => "a list of integer token ids (set `text_column` for text)",
            };
            return Err(err(Some(column), format!("is {dtype}, expected {want}")));
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), [index]);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(ROWS_PER_BATCH)
            .build()
            .map_err(|e| err(Some(column), format!("unreadable parquet: {e}")))?;
        Ok(Self {
            dataset: dataset.to_string(),
            path: path.to_path_buf(),
            field: field.clone(),
            reader,
            row: 0,
        })
    }

    fn err(&self, message: String) -> Error {
        Error::Dataset {
            dataset: self.dataset.clone(),
            file: self.path.clone(),
            column: Some(self.field.name().to_string()),
            message,
        }
    }

    /// The next rows as (row index, payload), null rows left out; None at the end of the file.
    pub fn next_batch(&mut self) -> Result<Option<Vec<(u64, Payload)>>> {
        let batch = match self.reader.next() {
            None => return Ok(None),
            Some(b) => b.map_err(|e| self.err(format!("unreadable parquet: {e}")))?,
        };
        let column = batch.column(0);
        let first = self.row;
        self.row += column.len() as u64;
        let rows = match self.field {
            Field::Text(_) => texts(column)
                .into_iter()
                .enumerate()
                .filter_map(|(i, t)| Some((first + i as u64, Payload::Text(t?))))
                .collect(),
            Field::Tokens(_) => self
                .token_rows(column, first)?
                .into_iter()
                .enumerate()
                .filter_map(|(i, t)| Some((first + i as u64, Payload::Tokens(t?))))
                .collect(),
        };
        Ok(Some(rows))
    }

    fn token_rows(&self, column: &ArrayRef, first: u64) -> Result<Vec<Option<Vec<u32>>>> {
        let bounds: Vec<Option<(usize, usize)>>;
        let values: &ArrayRef;
        match column.data_type() {
            DataType::List(_) => {
                let list = column.as_list::<i32>();
                bounds = list_bounds(list);
                values = list.values();
            }
            DataType::LargeList(_) => {
                let list = column.as_list::<i64>();
                bounds = list_bounds(list);
                values = list.values();
            }
            _ => {
                let list = column.as_fixed_size_list();
                let n = list.value_length() as usize;
                bounds = (0..list.len())
                    .map(|i| list.is_valid(i).then_some((i * n, i * n + n)))
                    .collect();
                values = list.values();
            }
        }
        let ids = arrow_cast::cast(values, &DataType::Int64)
            .map_err(|e| self.err(format!("token ids: {e}")))?;
        let ids = ids.as_primitive::<Int64Type>();
        bounds
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let Some((start, end)) = b else {
                    return Ok(None);
                };
                let row = first + i as u64;
                (start..end)
                    .map(|j| {
                        if ids.is_null(j) {
                            return Err(self.err(format!("row {row}: a null token id")));
                        }
                        super::token_id(ids.value(j))
                            .map_err(|m| self.err(format!("row {row}: {m}")))
                    })
                    .collect::<Result<Vec<u32>>>()
                    .map(Some)
            })
            .collect()
    }
}

/// The columns of a parquet file (from its footer) and whether each holds lists of integers.
pub(super) fn columns(dataset: &str, path: &Path) -> Result<Vec<(String, bool)>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::Dataset {
        dataset: dataset.to_string(),
        file: path.to_path_buf(),
        column: None,
        message: format!("unreadable parquet: {e}"),
    })?;
    Ok(builder
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), is_token_list(f.data_type())))
        .collect())
}

fn is_token_list(dtype: &DataType) -> bool {
    list_item(dtype).is_some_and(DataType::is_integer)
}

fn is_text(dtype: &DataType) -> bool {
    matches!(
        dtype,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn list_item(dtype: &DataType) -> Option<&DataType> {
    match dtype {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

fn texts(column: &ArrayRef) -> Vec<Option<String>> {
    let own = |s: Option<&str>| s.map(str::to_string);
    match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().iter().map(own).collect(),
        DataType::LargeUtf8 => column.as_string::<i64>().iter().map(own).collect(),
        _ => column.as_string_view().iter().map(own).collect(),
    }
}

fn list_bounds<O: OffsetSizeTrait>(
    list: &arrow_array::GenericListArray<O>,
) -> Vec<Option<(usize, usize)>> {
    let offsets = list.value_offsets();
    (0..list.len())
        .map(|i| {
            list.is_valid(i)
                .then(|| (offsets[i].as_usize(), offsets[i + 1].as_usize()))
        })
        .collect()
}
