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
            for part in parts {
                let mut rest = *part;
                while !rest.is_empty() {
                    let written = insert.write(rest).await?;
                    rest = &rest[written..];
                }
            }
            insert.end().await
        };
        let result = match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result,
            // Dropping the request aborts it; the retry carries the same token in case the server
            // still completes this one.
            Err(_) => Err(::clickhouse::error::Error::TimedOut),
        };
        match result {
            Ok(()) => {
                state.succeeded(index);
                Ok(())
            }
            Err(error) => {
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
