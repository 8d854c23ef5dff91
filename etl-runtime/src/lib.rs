//! etl-runtime: the shared runtime every generated pipeline runs on.
