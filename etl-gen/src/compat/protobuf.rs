//! `gen --check --registry` for `format.protobuf`: each registered `.proto` version, compiled with
//! its references, judged by etl-schema's rules (`etl_schema::protobuf::compat`, which says what
//! is checked), the rules the binary applies to the writer schemas it fetches.

use super::{Incompatible, WriterVersion};
use crate::readers::protobuf::Message;

/// Checks each version against the reader's message; the result lists the versions (and in them
/// each field) the reader cannot read.
pub(crate) fn check(reader: &Message, versions: &[WriterVersion]) -> Vec<Incompatible> {
    versions
        .iter()
        .flat_map(|v| super::findings(v, etl_schema::protobuf::compat::check(reader, &v.schema, &v.imports)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const READER: &str = r#"syntax = "proto3";
package web;
import "google/protobuf/timestamp.proto";
message Click {
  int64 id = 1;
  string url = 2;
  Kind kind = 3;
  optional int32 score = 4;
  Geo geo = 5;
  repeated string tags = 6;
  map<string, int64> counts = 7;
  google.protobuf.Timestamp at = 8;
}
enum Kind { UNKNOWN = 0; VIEW = 1; BUY = 2; }
message Geo { string city = 1; double lat = 2; }
"#;

    fn reader() -> Message {
        let sources = BTreeMap::from([("click.proto".to_owned(), READER.to_owned())]);
        etl_schema::protobuf::parse_sources("click.proto", &sources, "web.Click").unwrap().unwrap()
    }

    fn version(version: u32, schema: &str) -> WriterVersion {
        WriterVersion { version, id: 300 + version, schema: schema.to_owned(), imports: BTreeMap::new() }
    }

    // Renamed fields, new fields, dropped fields, narrower integers, fewer enum values and a
    // singular writer of a repeated field are all read.
    #[test]
    fn evolved_writers_the_decoder_reads_pass() {
        let evolved = version(
            2,
            r#"syntax = "proto3";
package web;
import "google/protobuf/timestamp.proto";
message Click {
  int32 click_id = 1;
  string url = 2;
  Kind kind = 3;
  optional int32 score = 4;
  Geo geo = 5;
  string tags = 6;
  google.protobuf.Timestamp at = 8;
  bytes extra = 9;
}
enum Kind { UNKNOWN = 0; BUY = 2; }
message Geo { string town = 1; }
"#,
        );
        let found = check(&reader(), &[version(1, READER), evolved]);
        assert!(found.is_empty(), "{found:#?}");
    }

    // Each rule names the version and the field by its path of names and numbers.
    #[test]
    fn unreadable_fields_are_named_by_path() {
        let broken = version(
            3,
            r#"syntax = "proto3";
package web;
message Click {
  sint64 id = 1;
  repeated string url = 2;
  Kind kind = 3;
  int32 score = 4;
  Geo geo = 5;
  map<int32, int64> counts = 7;
}
enum Kind { UNKNOWN = 0; VIEW = 1; BUY = 2; REFUND = 3; }
message Geo { string city = 1; float lat = 2; }
"#,
        );
        let found = check(&reader(), &[broken]);
        let paths: Vec<&str> = found.iter().map(|i| i.field.as_deref().unwrap()).collect();
        assert_eq!(
            paths,
            ["id = 1", "url = 2", "kind = 3", "score = 4", "geo = 5.lat = 2", "counts = 7"],
            "{found:#?}"
        );
        assert_eq!(
            found[0].message,
            "writer version 3 (id 303): field `id = 1`: it is sint64 in the writer and int64 in the reader"
        );
        assert!(found[1].message.contains("repeated in the writer"), "{}", found[1].message);
        assert!(found[2].message.contains("(REFUND = 3)"), "{}", found[2].message);
        assert!(found[3].message.contains("presence in the reader"), "{}", found[3].message);
        assert!(found[4].message.contains("float in the writer and double in the reader"), "{}", found[4].message);
        assert!(found[5].message.contains("map key is int32"), "{}", found[5].message);
    }

    // The message must exist at the same message-index path; references resolve by name.
    #[test]
    fn the_message_and_its_index_path_are_checked() {
        let moved = version(
            4,
            r#"syntax = "proto3";
package web;
message Other { int64 x = 1; }
message Click { int64 id = 1; }
"#,
        );
        let missing = version(5, "syntax = \"proto3\";\npackage web;\nmessage View { int64 id = 1; }\n");
        let mut imported = version(
            6,
            "syntax = \"proto3\";\npackage web;\nimport \"geo.proto\";\nmessage Click { int64 id = 1; Geo geo = 5; }\n",
        );
        imported
            .imports
            .insert("geo.proto".into(), "syntax = \"proto3\";\npackage web;\nmessage Geo { int64 city = 1; }\n".into());
        let found = check(&reader(), &[moved, missing, imported]);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].message.contains("message-index path [1]"), "{}", found[0].message);
        assert!(
            found[1].message.contains("does not define message `web.Click` (it defines: web.View)"),
            "{}",
            found[1].message
        );
        assert_eq!(found[2].field.as_deref(), Some("geo = 5.city = 1"), "{found:#?}");
    }
}
