//! etl-gen: the pipeline.yaml model, validation rules, IR and code emission.
