//! The config hash: what names one build of a pipeline. It is the binary's `--version`, the
//! image's tag and label and `etl_build_info`'s `config_hash`, and the exactly-once ledger
//! keeps it with every batch so that spans written under another configuration are never
//! reused (docs/adr/0001-exactly-once.md).

use sha2::{Digest as _, Sha256};

use crate::model::PipelineFile;

/// sha256 over the normalized configuration, the schema text, the compiled descriptor set of a
/// `.proto` (`compiled`, whose imports shape the decoder too; empty for other formats) and the
/// texts of the user Rust files in chain order; the first 16 hex digits.
///
/// Each part is prefixed with its length, so that moving bytes from one part to the next changes
/// the hash. The configuration is hashed as the model serializes it, not as written, so that
/// comments and layout do not change the hash.
pub(super) fn config_hash<'a>(
    model: &PipelineFile,
    schema_text: &str,
    compiled: &[u8],
    user_files: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut h = Sha256::new();
    let normalized = serde_json::to_string(model).expect("the model serializes");
    h.update((normalized.len() as u64).to_le_bytes());
    h.update(normalized.as_bytes());
    h.update((schema_text.len() as u64).to_le_bytes());
    h.update(schema_text.as_bytes());
    if !compiled.is_empty() {
        h.update((compiled.len() as u64).to_le_bytes());
        h.update(compiled);
    }
    for text in user_files {
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    hex::encode(h.finalize())[..16].to_owned()
}
