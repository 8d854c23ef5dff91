//! Refused rows: a batch ClickHouse refuses is bisected into sub-inserts until the refused rows
//! are isolated; the others are written.

use crate::clickhouse::ClickhouseSink;
use crate::clickhouse::errors::Class;
use crate::clickhouse::insert::Failure;
use crate::engine::chunk::Batch;
use crate::engine::errors::{SinkError, SinkErrorKind};

/// The most sub-inserts spent isolating the refused rows of one batch (about `2 × log2(rows)` per
/// refused row).
const MAX_ISOLATION_INSERTS: usize = 256;

/// A slice of a batch that is inserted or refused as a whole: one row, or one chunk whose rows
/// could not be delimited.
struct Unit<'a> {
    bytes: &'a [u8],
    first_row: u64,
    rows: u64,
}

impl ClickhouseSink {
    /// Splits a batch into the units refused rows are isolated by: rows where the encoding can be
    /// walked, whole chunks elsewhere.
    fn units<'a>(&self, batch: &'a Batch) -> Vec<Unit<'a>> {
        let mut units = Vec::new();
        let mut first_row = 0u64;
        for chunk in batch.chunks() {
            let rows = u64::from(chunk.rows());
            let ends = self.layout.as_ref().and_then(|layout| layout.row_ends(chunk.bytes(), chunk.rows() as usize));
            match ends {
                Some(ends) => {
                    let mut start = 0;
                    for (i, end) in ends.into_iter().enumerate() {
                        units.push(Unit {
                            bytes: &chunk.bytes()[start..end],
                            first_row: first_row + i as u64,
                            rows: 1,
                        });
                        start = end;
                    }
                }
                None => {
                    if self.layout.is_some() {
                        tracing::warn!(
                            shard = batch.shard(),
                            partition = chunk.partition(),
                            first_offset = chunk.first_offset(),
                            "chunk does not decode as its rows of the declared column types; isolating it whole"
                        );
                    }
                    units.push(Unit { bytes: chunk.bytes(), first_row, rows });
                }
            }
            first_row += rows;
        }
        units
    }

    /// Bisects a batch ClickHouse refused: inserts what it accepts, returns the refused rows as a
    /// [`SinkErrorKind::Data`] error, or `Ok` if every row went in after all.
    pub(super) async fn isolate(&self, shard: usize, batch: &Batch, first: Failure) -> Result<(), SinkError> {
        let units = self.units(batch);
        tracing::info!(
            shard,
            token = batch.token(),
            rows = batch.rows(),
            units = units.len(),
            "ClickHouse refused data; isolating the refused rows"
        );
        let mut refused: Vec<u64> = Vec::new();
        let mut failing = vec![(0, units.len())];
        let mut inserts = 0;
        while let Some((lo, hi)) = failing.pop() {
            if hi - lo <= 1 {
                // Tested alone (or the whole batch was this one unit): refused.
                if let Some(unit) = units.get(lo) {
                    refused.extend(unit.first_row..unit.first_row + unit.rows);
                }
                continue;
            }
            let mid = lo + (hi - lo) / 2;
            for (a, b) in [(lo, mid), (mid, hi)] {
                inserts += 1;
                if inserts > MAX_ISOLATION_INSERTS {
                    return Err(SinkError::fatal(format!(
                        "ClickHouse refuses too many rows of batch {} on shard {shard} to isolate them with \
                         {MAX_ISOLATION_INSERTS} inserts (the table or the data changed systematically): {}",
                        batch.token(),
                        first.message
                    )));
                }
                let parts: Vec<&[u8]> = units[a..b].iter().map(|u| u.bytes).collect();
                let token = format!("{}:{a}-{b}", batch.token());
                match self.insert(shard, &token, &parts).await {
                    Ok(()) => {}
                    Err(failure) if failure.class == Class::Data => failing.push((a, b)),
                    Err(failure) => return Err(failure.into_sink_error()),
                }
            }
        }
        if refused.is_empty() {
            tracing::info!(shard, token = batch.token(), inserts, "every row was accepted in smaller inserts");
            return Ok(());
        }
        refused.sort_unstable();
        tracing::warn!(
            shard,
            token = batch.token(),
            refused = refused.len(),
            rows = batch.rows(),
            inserts,
            "ClickHouse refused rows; the others are written"
        );
        Err(SinkError {
            message: format!(
                "ClickHouse refused {} of {} rows of batch {} on shard {shard} (the others are written): {}",
                refused.len(),
                batch.rows(),
                batch.token(),
                first.message
            ),
            kind: SinkErrorKind::Data { rows: refused },
        })
    }
}
