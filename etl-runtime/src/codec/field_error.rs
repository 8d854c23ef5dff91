//! The error the JSON and Protobuf readers return: what was wrong, in which field, at which byte,
//! with the one message format both turn into a record error.

use std::fmt;
use std::marker::PhantomData;

use crate::engine::errors::{RecordError, RecordErrorKind};

/// The position of an error that is about the whole input rather than a byte of it (a missing
/// JSON property): its message names no byte.
pub(super) const NOWHERE: usize = usize::MAX;

/// What a reader reads, as its errors name it when the input as a whole is at fault: a
/// zero-sized marker per reader (`json_read::JsonDocument`, `proto_read::ProtobufMessage`).
pub trait Input {
    /// The input in an error message: "invalid {NAME}: ...".
    const NAME: &'static str;
}

/// Why an input did not decode: what was wrong, in which field, at which byte. `I` says what
/// was read (a JSON document, a Protobuf message); each reader names its own as an alias
/// (`json_read::JsonError`, `proto_read::ProtoError`).
///
/// Small and `Copy`, so that the decoder's hot path pays little for its error type; the message
/// is formatted only when a record fails, by the conversion into [`RecordError`]. The input is a
/// type parameter rather than a field so that it costs no byte.
pub struct FieldError<I> {
    what: &'static str,
    field: &'static str,
    at: usize,
    input: PhantomData<I>,
}

impl<I> FieldError<I> {
    /// `what` was wrong in `field` (`""`: the input itself) at byte `at` ([`NOWHERE`]: no byte).
    #[inline]
    pub(super) const fn new(what: &'static str, field: &'static str, at: usize) -> Self {
        FieldError { what, field, at, input: PhantomData }
    }

    /// What was wrong.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The field (its path in the schema, `items[].sku`), or `""` for the input itself.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The same error, in `field` (a value read whole, whose inner errors name no field).
    pub(super) fn in_field(self, field: &'static str) -> Self {
        FieldError { field, ..self }
    }
}

// Written out rather than derived: a derive would bound `I`, and print the marker's type path.
impl<I> Clone for FieldError<I> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I> Copy for FieldError<I> {}

impl<I> PartialEq for FieldError<I> {
    fn eq(&self, other: &Self) -> bool {
        (self.what, self.field, self.at) == (other.what, other.field, other.at)
    }
}

impl<I> Eq for FieldError<I> {}

impl<I: Input> fmt::Debug for FieldError<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FieldError")
            .field("input", &I::NAME)
            .field("what", &self.what)
            .field("field", &self.field)
            .field("at", &self.at)
            .finish()
    }
}

impl<I: Input> fmt::Display for FieldError<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "invalid {}: {}", I::NAME, self.what)?;
        } else {
            write!(f, "field `{}`: {}", self.field, self.what)?;
        }
        if self.at != NOWHERE {
            write!(f, " (at byte {})", self.at)?;
        }
        Ok(())
    }
}

impl<I: Input> From<FieldError<I>> for RecordError {
    #[cold]
    fn from(e: FieldError<I>) -> Self {
        RecordError::new(RecordErrorKind::Decode, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::json_read::JsonError;
    use crate::codec::proto_read::ProtoError;

    // The messages record errors carry, as each reader wrote them before the two shared a type.
    #[test]
    fn messages_name_the_input_the_field_and_the_byte() {
        let json = |field, at| JsonError::new("expected an object", field, at).to_string();
        assert_eq!(json("", 3), "invalid JSON document: expected an object (at byte 3)");
        assert_eq!(json("geo", 0), "field `geo`: expected an object (at byte 0)");
        assert_eq!(json("customer.id", NOWHERE), "field `customer.id`: expected an object");
        assert_eq!(json("", NOWHERE), "invalid JSON document: expected an object");
        let proto = |field, at| ProtoError::new("an invalid wire type", field, at).to_string();
        assert_eq!(proto("", 7), "invalid Protobuf message: an invalid wire type (at byte 7)");
        assert_eq!(proto("items[].sku", 12), "field `items[].sku`: an invalid wire type (at byte 12)");
        let record = RecordError::from(ProtoError::new("an invalid wire type", "", 1));
        assert_eq!((record.kind, record.message), (RecordErrorKind::Decode, proto("", 1)));
    }

    // The marker costs nothing: the error is as small as the three fields.
    #[test]
    fn the_input_costs_no_byte() {
        assert_eq!(size_of::<JsonError>(), size_of::<(&str, &str, usize)>());
        assert_eq!(size_of::<ProtoError>(), size_of::<(&str, &str, usize)>());
    }
}
