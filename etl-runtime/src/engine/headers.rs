//! A record's Kafka headers as the chain reads them: `header('name')`, `header_str('name')` and
//! the `_headers` map, over the consumer's message without copying it, or over an owned copy
//! (a record held back for retry).

use std::borrow::Cow;
use std::fmt;

use crate::engine::errors::{RecordError, RecordErrorKind};

/// Where the headers of a message are read from: the source's message (a librdkafka header
/// list) implements this. Names are bytes: Kafka does not check that a header name is UTF-8,
/// and a producer of another client can send any.
pub trait HeaderSource {
    /// How many headers the message has (a repeated name counts each time).
    fn count(&self) -> usize;
    /// Header `index`, in the order the producer added them: its name and its value (`None`
    /// for a header sent with a null value).
    fn get(&self, index: usize) -> Option<(&[u8], Option<&[u8]>)>;
}

/// One header, owned: name and value.
pub type OwnedHeader = (Box<[u8]>, Option<Box<[u8]>>);

/// The headers of one record (none, for a source without them).
#[derive(Clone, Copy, Default)]
pub struct Headers<'a>(Repr<'a>);

#[derive(Clone, Copy, Default)]
enum Repr<'a> {
    #[default]
    Empty,
    Source(&'a dyn HeaderSource),
    Owned(&'a [OwnedHeader]),
}

impl<'a> Headers<'a> {
    /// No headers.
    pub const NONE: Headers<'static> = Headers(Repr::Empty);

    /// The headers of a source's message.
    pub fn of(source: &'a dyn HeaderSource) -> Self {
        Headers(Repr::Source(source))
    }

    /// Headers owned elsewhere (a held record's copy, a test's list).
    pub fn owned(headers: &'a [OwnedHeader]) -> Self {
        if headers.is_empty() { Headers::NONE } else { Headers(Repr::Owned(headers)) }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        match self.0 {
            Repr::Empty => 0,
            Repr::Source(s) => s.count(),
            Repr::Owned(h) => h.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Header `index`: name and value.
    pub fn get(&self, index: usize) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        match self.0 {
            Repr::Empty => None,
            Repr::Source(s) => s.get(index),
            Repr::Owned(h) => h.get(index).map(|(n, v)| (&**n, v.as_deref())),
        }
    }

    /// Every header in the order the producer added them.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// `header('name')`: the value of the last header called `name`; `None` when there is no
    /// such header or the last one has a null value. The last, because a producer that adds a
    /// header again (a retrying interceptor, a forwarding hop) means it to replace the first.
    #[inline]
    pub fn last(&self, name: &str) -> Option<&'a [u8]> {
        if self.is_empty() {
            return None;
        }
        let mut found = None;
        for (n, v) in self.iter() {
            if n == name.as_bytes() {
                found = Some(v);
            }
        }
        found.flatten()
    }

    /// `header_str('name')`: [`Headers::last`] as text; a value that is not UTF-8 is a record
    /// error naming the header.
    #[inline]
    pub fn last_str(&self, name: &str) -> Result<Option<Cow<'a, str>>, RecordError> {
        match self.last(name) {
            None => Ok(None),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => Ok(Some(Cow::Borrowed(text))),
                Err(e) => Err(RecordError::new(
                    RecordErrorKind::Decode,
                    format!("header `{name}` is not UTF-8 text ({e}); read it with header('{name}') as bytes"),
                )),
            },
        }
    }

    /// `_headers`: each name once, in the order it first appears, with its last value (as
    /// `header()` reads it); a null value is empty. A name that is not UTF-8 is written with
    /// U+FFFD for its invalid bytes (a ClickHouse map key is a String, and so is text here).
    pub fn to_map(&self) -> Vec<(Cow<'a, str>, Cow<'a, [u8]>)> {
        let mut map: Vec<(Cow<'a, str>, Cow<'a, [u8]>)> = Vec::with_capacity(self.len());
        for (name, value) in self.iter() {
            let name = String::from_utf8_lossy(name);
            let value = Cow::Borrowed(value.unwrap_or_default());
            match map.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => map.push((name, value)),
            }
        }
        map
    }

    /// An owned copy, for a record that outlives its message.
    pub fn to_owned_headers(&self) -> Vec<OwnedHeader> {
        self.iter().map(|(n, v)| (n.into(), v.map(Into::into))).collect()
    }
}

impl fmt::Debug for Headers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| (String::from_utf8_lossy(n), v.map(String::from_utf8_lossy))))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(headers: &[(&[u8], Option<&[u8]>)]) -> Vec<OwnedHeader> {
        headers.iter().map(|(n, v)| ((*n).into(), v.map(Into::into))).collect()
    }

    #[test]
    fn the_last_header_of_a_name_wins_and_a_null_value_reads_as_null() {
        let owned = list(&[(b"trace", Some(b"a")), (b"tenant", Some(b"eu")), (b"trace", Some(b"b")), (b"gone", None)]);
        let h = Headers::owned(&owned);
        assert_eq!(h.last("trace"), Some(&b"b"[..]));
        assert_eq!(h.last("tenant"), Some(&b"eu"[..]));
        assert_eq!(h.last("gone"), None);
        assert_eq!(h.last("absent"), None);
        assert_eq!(Headers::NONE.last("trace"), None);
        // A later null hides an earlier value: the producer's last word is "no value".
        let owned = list(&[(b"trace", Some(b"a")), (b"trace", None)]);
        assert_eq!(Headers::owned(&owned).last("trace"), None);
    }

    #[test]
    fn header_str_refuses_a_value_that_is_not_utf8_and_names_the_header() {
        let owned = list(&[(b"bin", Some(&[0xff, 0xfe][..])), (b"text", Some("ünï".as_bytes()))]);
        let h = Headers::owned(&owned);
        assert_eq!(h.last_str("text").unwrap().as_deref(), Some("ünï"));
        assert_eq!(h.last_str("absent").unwrap(), None);
        let e = h.last_str("bin").unwrap_err();
        assert_eq!(e.kind, RecordErrorKind::Decode);
        assert!(e.message.contains("header `bin`"), "{}", e.message);
    }

    #[test]
    fn the_map_keeps_each_name_once_with_its_last_value_in_first_seen_order() {
        let owned =
            list(&[(b"b", Some(b"1")), (b"a", None), (b"b", Some(b"2")), (&[0x66, 0xff][..], Some(&[0x00, 0x01][..]))]);
        let map = Headers::owned(&owned).to_map();
        let shown: Vec<(&str, &[u8])> = map.iter().map(|(k, v)| (k.as_ref(), v.as_ref())).collect();
        assert_eq!(shown, [("b", &b"2"[..]), ("a", &b""[..]), ("f\u{fffd}", &[0x00, 0x01][..])]);
        assert!(Headers::NONE.to_map().is_empty());
    }

    #[test]
    fn an_owned_copy_reads_like_the_original() {
        let owned = list(&[(b"x", Some(b"1")), (b"y", None)]);
        let h = Headers::owned(&owned);
        let copy = h.to_owned_headers();
        assert_eq!(copy, owned);
        assert_eq!(Headers::owned(&copy).last("x"), Some(&b"1"[..]));
    }
}
