//! E0608–E0609: a `.proto` file compiles, defines the configured message, and the message uses
//! only what maps to columns.

use std::path::Path;

use crate::diag::{Diagnostic, Rule};
use crate::readers::protobuf::{self as proto_schema, Invalid, Message};

/// The file does not compile, or does not define `format.protobuf.message`.
pub(crate) static INVALID: Rule = Rule {
    code: "E0608",
    name: "protobuf-schema-invalid",
    summary: "`format.protobuf.schema` does not compile, or does not define `format.protobuf.message`",
    doc: "The file is compiled as `protoc` would (by `protox`, with imports resolved relative to \
the file's directory and Google's well-known types built in); the compiler's message is shown. \
`format.protobuf.message` is a fully qualified message name (`web.Click`, `web.Click.Item` for a \
nested one); when the file does not define it, the messages it does define are listed.",
};

/// The message uses a construct with no column mapping.
pub(crate) static UNSUPPORTED: Rule = Rule {
    code: "E0609",
    name: "protobuf-unsupported",
    summary: "the Protobuf message uses a construct with no ClickHouse mapping",
    doc: "Supported: every scalar type, enums, nested messages, `repeated` (packed or not), \
`map<K, V>`, `oneof`, `optional` (proto3 and proto2), proto2 `required`, \
`google.protobuf.Timestamp`, `Struct` and `Value` (JSON columns) and the wrapper types \
(`Int64Value`, `StringValue`, ...). Not supported: proto2 groups, messages with extension ranges \
(extensions), recursive messages, the other well-known types (`Any`, `ListValue`, `Duration`, \
`Empty`, `FieldMask`), and \
repeated wrappers or maps of wrappers, and two types whose generated struct names meet \
(`Foo.Bar` and `FooBar`, or a type named `Chain` without a package). Each place is listed with \
its field path (`items.sku`).",
};

/// The key that names the schema file: where its diagnostics point.
const PATH: &str = "format.protobuf.schema";

/// Compiles the file `relative` (at `path`) and reads `message` from it.
pub(crate) fn convert(relative: &str, path: &Path, message: &str) -> Result<Message, Vec<Diagnostic>> {
    match proto_schema::parse(path, message) {
        Err(Invalid::Compile(why)) => Err(vec![
            Diagnostic::error(&INVALID, PATH, format!("`{relative}` does not compile: {why}"))
                .on_value()
                .help("fix the file; imports are resolved relative to its directory"),
        ]),
        Err(Invalid::UnknownMessage(defined)) => {
            let help = if defined.is_empty() {
                "the file defines no message".to_owned()
            } else {
                format!("the file defines: {}", defined.join(", "))
            };
            Err(vec![
                Diagnostic::error(
                    &INVALID,
                    "format.protobuf.message",
                    format!("`{relative}` does not define the message `{message}`"),
                )
                .on_value()
                .help(format!("{help} (a name is fully qualified: `package.Message`)")),
            ])
        }
        Ok(Err(found)) => Err(super::schema_file::unsupported(&UNSUPPORTED, PATH, relative, "at", found)),
        Ok(Ok(message)) => Ok(message),
    }
}
