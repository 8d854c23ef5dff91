//! The list of librdkafka properties whose values are secret is librdkafka's own: every property
//! its bundled `rdkafka_conf.c` flags `_RK_SENSITIVE` is in `etl-runtime/src/secret.rs`, so an
//! upgrade that marks another one fails here until the list has it.

#[path = "../../etl-runtime/src/secret.rs"]
#[allow(dead_code, unreachable_pub)]
mod secret;

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn every_property_librdkafka_marks_sensitive_is_secret() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let metadata = cargo_metadata::MetadataCommand::new().manifest_path(&manifest).exec().expect("cargo metadata");
    let sys = metadata
        .packages
        .iter()
        .find(|p| p.name.as_str() == "rdkafka-sys")
        .expect("rdkafka-sys is in the dependency graph");
    let conf = sys.manifest_path.parent().unwrap().join("librdkafka/src/rdkafka_conf.c");
    let text = std::fs::read_to_string(&conf).unwrap_or_else(|e| panic!("{conf}: {e}"));
    // Each flagged entry reads `{<scope> | _RK_SENSITIVE, "name", ...`, the name sometimes on
    // the next line: the first string literal after the flag.
    let marked: BTreeSet<&str> = text
        .match_indices("_RK_SENSITIVE,")
        .filter_map(|(at, flag)| {
            let rest = text[at + flag.len()..].trim_start().strip_prefix('"')?;
            Some(&rest[..rest.find('"')?])
        })
        .collect();
    assert!(marked.contains("sasl.password") && marked.len() >= 10, "parsed {marked:?} from {conf}");
    let ours: BTreeSet<&str> = secret::SENSITIVE_RDKAFKA_PROPERTIES.iter().copied().collect();
    let missing: Vec<&&str> = marked.difference(&ours).collect();
    assert!(missing.is_empty(), "librdkafka marks {missing:?} sensitive; add them to SENSITIVE_RDKAFKA_PROPERTIES");
    for name in &marked {
        assert!(secret::is_secret_property(name), "{name}");
    }
}
