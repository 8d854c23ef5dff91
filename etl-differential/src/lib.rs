//! Nothing to link: this crate holds the differential tests of the generated decoders
//! (`tests/differential.rs`) and the build script that draws their random schemas (`build.rs`).
