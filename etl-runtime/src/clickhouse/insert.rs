//! One INSERT on a shard's current replica, bounded by the timeout, and its failure classified
//! and scrubbed of the password.

use crate::clickhouse::ClickhouseSink;
use crate::clickhouse::errors::{self, Class};
use crate::clickhouse::replicas;
use crate::engine::errors::SinkError;

/// A failed request, classified, its message already scrubbed of the password.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) class: Class,
    pub(super) message: String,
}

impl Failure {
    /// `error`, classified, its message scrubbed of `password`.
    pub(super) fn of(error: &::clickhouse::error::Error, password: &str) -> Failure {
        let message = crate::secret::redact_message(&errors::describe(error), [password]);
        Failure { class: errors::classify(error), message }
    }

    pub(super) fn into_sink_error(self) -> SinkError {
        match self.class {
            Class::Retryable => SinkError::retryable(self.message),
            // A data error only reaches here from a request that is not an insert of rows.
            Class::Fatal | Class::Data => SinkError::fatal(self.message),
        }
    }
}

/// Why an insert request did not succeed.
enum Sent {
    /// The request failed or ClickHouse refused it.
    Failed(::clickhouse::error::Error),
    /// `format: native`: the batch's bytes are not rows of the declared types, so no Native block
    /// could be made of them; nothing was sent to completion.
    NotRows,
}

impl From<::clickhouse::error::Error> for Sent {
    fn from(error: ::clickhouse::error::Error) -> Self {
        Sent::Failed(error)
    }
}

const NOT_ROWS_TEXT: &str = "the batch's bytes do not decode as rows of the declared column types (an encoder \
                             and the types disagree), so no Native block could be made of them";

impl ClickhouseSink {
    /// One INSERT of `parts` (whole rows, back to back) under `token`, on the shard's current
    /// replica, bounded by the timeout; the replica's health follows the outcome.
    pub(super) async fn insert(&self, shard: usize, token: &str, parts: &[&[u8]]) -> Result<(), Failure> {
        let state = &self.shards[shard];
        let index = state.pick();
        let replica = &state.replicas[index];
        replicas::probe_recovered(&self.shards, &self.probe, shard, index, self.timeout);
        let mut insert = replica
            .client
            .insert_formatted_with(self.insert_sql.as_str())
            .with_setting("wait_end_of_query", "1")
            .with_setting("insert_deduplication_token", token);
        for (key, value) in &self.settings {
            insert = insert.with_setting(key.as_str(), value.as_str());
        }
        let request = async move {
            let mut insert = insert.buffered();
            match &self.native {
                None => {
                    for part in parts {
                        let mut rest = *part;
                        while !rest.is_empty() {
                            let written = insert.write(rest).await?;
                            rest = &rest[written..];
                        }
                    }
                }
                Some((empty, pool)) => {
                    let mut encoder = pool.lock().expect("encoder pool").pop().unwrap_or_else(|| empty.clone());
                    for part in parts {
                        let mut rest = *part;
                        while !rest.is_empty() {
                            // An encoder and the declared types disagree. The body sent so far
                            // is dropped unfinished, which aborts the insert.
                            let taken = encoder.take_rows(rest).ok_or(Sent::NotRows)?;
                            rest = &rest[taken..];
                            if encoder.is_full() {
                                encoder.finish(|bytes| insert.write_buffered(bytes));
                                insert.flush().await?;
                            }
                        }
                    }
                    if encoder.rows() > 0 {
                        encoder.finish(|bytes| insert.write_buffered(bytes));
                    }
                    pool.lock().expect("encoder pool").push(encoder);
                }
            }
            insert.end().await.map_err(Sent::Failed)
        };
        let result = match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result,
            // Dropping the request aborts it; the retry carries the same token in case the server
            // still completes this one.
            Err(_) => Err(Sent::Failed(::clickhouse::error::Error::TimedOut)),
        };
        match result {
            Ok(()) => {
                state.succeeded(index);
                Ok(())
            }
            Err(Sent::NotRows) => {
                state.errors[Class::Data.index()].inc();
                tracing::warn!(
                    shard,
                    token,
                    "the rows do not decode as the declared column types; nothing was inserted"
                );
                Err(Failure {
                    class: Class::Data,
                    message: format!("{NOT_ROWS_TEXT} (insert {token} on shard {shard})"),
                })
            }
            Err(Sent::Failed(error)) => {
                let failure = self.failure(&error);
                state.errors[failure.class.index()].inc();
                if failure.class == Class::Retryable {
                    state.failed(index);
                }
                tracing::warn!(
                    shard,
                    replica = %replica.shown,
                    token,
                    class = failure.class.label(),
                    error = %failure.message,
                    "ClickHouse insert failed"
                );
                Err(failure)
            }
        }
    }

    pub(super) fn failure(&self, error: &::clickhouse::error::Error) -> Failure {
        Failure::of(error, &self.password)
    }
}
