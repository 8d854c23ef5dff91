//! Minimal OCI image archives, written by the generator itself (no Docker daemon).
//!
//! [`write`] turns a statically linked pipeline binary into an `oci-archive` tarball: one
//! gzip layer with the binary and the few files a static binary needs at run time (a CA
//! bundle, `/etc/nsswitch.conf`, `/etc/hosts`, `/etc/passwd` and `/etc/group` for the
//! non-root user, a writable `/tmp`), an image config that runs as 65532:65532, an OCI
//! `index.json` and a docker-style `manifest.json` so both `docker load` and `podman load`
//! read it.
//!
//! Reproducibility: every timestamp is the given epoch, tar entries are sorted with fixed
//! owners and modes, and the JSON documents are written with sorted keys (oci-spec keeps
//! labels in `HashMap`s, whose order changes from run to run). The same input gives the
//! same bytes, hence the same manifest digest.

use std::collections::BTreeMap;
use std::io::Write as _;

use oci_spec::image::{
    ANNOTATION_REF_NAME, Arch, ConfigBuilder, Descriptor, DescriptorBuilder, Digest, HistoryBuilder,
    ImageConfigurationBuilder, ImageIndexBuilder, ImageManifestBuilder, MediaType, Os, RootFsBuilder,
};
use sha2::{Digest as _, Sha256};

/// The non-root user and group the image runs as (distroless's `nonroot`).
pub const NONROOT: u64 = 65532;

/// Where the CA bundle goes in the image (and where it is read from on the build machine).
pub const CA_BUNDLE_PATH: &str = "etc/ssl/certs/ca-certificates.crt";

/// containerd's annotation for the full image name (read by `ctr import`, BuildKit, nerdctl).
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";

/// What goes into the image.
#[derive(Debug, Clone)]
pub struct ImageSpec<'a> {
    /// The statically linked pipeline binary.
    pub binary: &'a [u8],
    /// The pipeline name: the binary is `/<name>`.
    pub name: &'a str,
    /// The full image reference, e.g. `localhost/orders:3f2a...` (see [`reference`]).
    pub reference: &'a str,
    /// The PEM CA bundle to ship at `/etc/ssl/certs/ca-certificates.crt`.
    pub ca_bundle: &'a [u8],
    /// The admin port to declare in `ExposedPorts` (none for port 0 or unknown).
    pub admin_port: Option<u16>,
    /// Image labels (pipeline name, config hash, etl-rs version, ...).
    pub labels: BTreeMap<String, String>,
    /// Seconds since 1970 for every timestamp (SOURCE_DATE_EPOCH, or 0).
    pub epoch: u64,
}

/// A written archive.
#[derive(Debug, Clone)]
pub struct Image {
    /// The `oci-archive` tarball.
    pub archive: Vec<u8>,
    /// `sha256:<hex>` of the image manifest: the digest registries report.
    pub manifest_digest: String,
    /// `sha256:<hex>` of the image config: the image ID `docker`/`podman` show.
    pub config_digest: String,
}

/// Why an archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// An oci-spec builder refused a document.
    #[error("building the OCI {what}: {source}")]
    Spec {
        /// Which document.
        what: &'static str,
        /// The builder's error.
        source: oci_spec::OciSpecError,
    },
    /// Writing the tar or gzip stream failed.
    #[error("writing the image archive: {0}")]
    Io(#[from] std::io::Error),
    /// The image reference is not `[registry/]repository:tag`.
    #[error("invalid image reference `{0}`: expected `[registry/]repository:tag`")]
    Reference(String),
}

/// The full reference for `--tag`: a bare tag becomes `localhost/<name>:<tag>` (podman's
/// convention for local images); anything with a `/` or `:` is taken as a full reference.
pub fn reference(name: &str, tag: &str) -> String {
    if tag.contains('/') || tag.contains(':') { tag.to_owned() } else { format!("localhost/{name}:{tag}") }
}

/// Splits a reference into (repository, tag); the tag is what follows the last `:` after
/// the last `/` (a registry port is not a tag).
fn split_reference(reference: &str) -> Result<(&str, &str), ImageError> {
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_slash..].rfind(':') {
        Some(i) if i > 0 && last_slash + i + 1 < reference.len() => {
            Ok((&reference[..last_slash + i], &reference[last_slash + i + 1..]))
        }
        _ => Err(ImageError::Reference(reference.to_owned())),
    }
}

/// `sha256:<hex>` of some bytes.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// RFC 3339 for the epoch (UTC), without a date library: the civil-from-days algorithm.
fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// One tar entry of the layer or the archive.
struct Entry {
    path: String,
    kind: tar::EntryType,
    mode: u32,
    uid: u64,
    data: Vec<u8>,
}

impl Entry {
    fn dir(path: &str, mode: u32, uid: u64) -> Self {
        Entry { path: format!("{path}/"), kind: tar::EntryType::Directory, mode, uid, data: Vec::new() }
    }
    fn file(path: &str, mode: u32, data: Vec<u8>) -> Self {
        Entry { path: path.to_owned(), kind: tar::EntryType::Regular, mode, uid: 0, data }
    }
}

/// A tar stream of the entries, sorted by path, with fixed owners, modes and times.
fn tar_bytes(mut entries: Vec<Entry>, epoch: u64) -> Result<Vec<u8>, ImageError> {
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut builder = tar::Builder::new(Vec::new());
    for e in entries {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(e.kind);
        header.set_mode(e.mode);
        header.set_uid(e.uid);
        header.set_gid(e.uid);
        header.set_mtime(epoch);
        header.set_size(e.data.len() as u64);
        builder.append_data(&mut header, &e.path, e.data.as_slice())?;
    }
    Ok(builder.into_inner()?)
}

/// The paths of the layer, for documentation and tests: see [`layer_entries`].
fn layer_entries(spec: &ImageSpec<'_>) -> Vec<Entry> {
    let n = NONROOT;
    vec![
        Entry::dir("etc", 0o755, 0),
        // A static glibc binary resolves names through NSS: without nsswitch.conf it would
        // try DNS only and never read /etc/hosts (so `localhost` would not resolve).
        Entry::file("etc/nsswitch.conf", 0o644, b"hosts: files dns\nnetworks: files\n".to_vec()),
        Entry::file("etc/hosts", 0o644, b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n".to_vec()),
        // getpwuid() for the running user (logs, librdkafka's SASL/Kerberos paths) needs
        // an entry; runtimes that override /etc/hosts and friends still read these.
        Entry::file(
            "etc/passwd",
            0o644,
            format!("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{n}:{n}:nonroot:/home/nonroot:/sbin/nologin\n")
                .into_bytes(),
        ),
        Entry::file("etc/group", 0o644, format!("root:x:0:\nnonroot:x:{n}:\n").into_bytes()),
        Entry::dir("etc/ssl", 0o755, 0),
        Entry::dir("etc/ssl/certs", 0o755, 0),
        Entry::file(CA_BUNDLE_PATH, 0o644, spec.ca_bundle.to_vec()),
        Entry::dir("home", 0o755, 0),
        Entry::dir("home/nonroot", 0o700, n),
        // Sticky and world-writable, like every /tmp; with `--read-only` the runtime mounts
        // a tmpfs here, without it the directory itself must be writable for 65532.
        Entry::dir("tmp", 0o1777, 0),
        // Owned by root: the process (65532) cannot replace its own binary.
        Entry::file(spec.name, 0o755, spec.binary.to_vec()),
    ]
}

/// JSON with object keys sorted at every level, so `HashMap` fields serialize the same way
/// in every process.
fn canonical_json(value: &impl serde::Serialize) -> Vec<u8> {
    fn sorted(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(map) => {
                let ordered: BTreeMap<String, serde_json::Value> =
                    map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
                serde_json::Value::Object(ordered.into_iter().collect())
            }
            serde_json::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(sorted).collect()),
            other => other,
        }
    }
    let value = serde_json::to_value(value).expect("OCI documents serialize");
    serde_json::to_vec(&sorted(value)).expect("a JSON value serializes")
}

fn spec_err(what: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> ImageError {
    move |source| ImageError::Spec { what, source }
}

fn digest(bytes: &[u8]) -> Digest {
    sha256(bytes).parse().expect("a sha256 digest parses")
}

fn descriptor(media_type: MediaType, bytes: &[u8]) -> Descriptor {
    Descriptor::new(media_type, bytes.len() as u64, digest(bytes))
}

fn blob_path(bytes: &[u8]) -> String {
    format!("blobs/sha256/{}", hex::encode(Sha256::digest(bytes)))
}

/// The OCI architecture of the machine that builds (the binary is built for the host).
fn arch() -> Arch {
    match std::env::consts::ARCH {
        "x86_64" => Arch::Amd64,
        "aarch64" => Arch::ARM64,
        other => Arch::Other(other.to_owned()),
    }
}

/// Writes the image archive for `spec`.
pub fn write(spec: &ImageSpec<'_>) -> Result<Image, ImageError> {
    let (repository, tag) = split_reference(spec.reference)?;
    let created = rfc3339(spec.epoch);

    let layer_tar = tar_bytes(layer_entries(spec), spec.epoch)?;
    // GzBuilder writes mtime 0 and no file name: the compressed bytes depend only on the tar.
    let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::default());
    gz.write_all(&layer_tar)?;
    let layer = gz.finish()?;

    let mut config = ConfigBuilder::default()
        .user(format!("{NONROOT}:{NONROOT}"))
        .entrypoint(vec![format!("/{}", spec.name)])
        .env(vec![format!("SSL_CERT_FILE=/{CA_BUNDLE_PATH}")])
        .working_dir("/")
        // The binary drains and commits on SIGTERM (what Kubernetes and `docker stop` send).
        .stop_signal("SIGTERM")
        .labels(spec.labels.clone().into_iter().collect::<std::collections::HashMap<_, _>>());
    if let Some(port) = spec.admin_port {
        config = config.exposed_ports(vec![format!("{port}/tcp")]);
    }
    let config = config.build().map_err(spec_err("image config"))?;
    let history = HistoryBuilder::default()
        .created(created.clone())
        .created_by(format!("etl-gen image (etl-rs {})", crate::emit::VERSION))
        .comment(format!("/{}, CA bundle, nsswitch.conf, hosts, passwd, group, /home/nonroot, /tmp", spec.name))
        .build()
        .map_err(spec_err("history entry"))?;
    let image_config = ImageConfigurationBuilder::default()
        .created(created)
        .architecture(arch())
        .os(Os::Linux)
        .config(config)
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![sha256(&layer_tar)])
                .build()
                .map_err(spec_err("rootfs"))?,
        )
        .history(vec![history])
        .build()
        .map_err(spec_err("image config"))?;
    let config_json = canonical_json(&image_config);

    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(MediaType::ImageConfig, &config_json))
        .layers(vec![descriptor(MediaType::ImageLayerGzip, &layer)])
        .build()
        .map_err(spec_err("image manifest"))?;
    let manifest_json = canonical_json(&manifest);

    let annotations = [
        (ANNOTATION_REF_NAME.to_owned(), tag.to_owned()),
        (ANNOTATION_CONTAINERD_NAME.to_owned(), spec.reference.to_owned()),
    ];
    let manifest_descriptor = DescriptorBuilder::default()
        .media_type(MediaType::ImageManifest)
        .size(manifest_json.len() as u64)
        .digest(digest(&manifest_json))
        .annotations(annotations.into_iter().collect::<std::collections::HashMap<_, _>>())
        .build()
        .map_err(spec_err("manifest descriptor"))?;
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![manifest_descriptor])
        .build()
        .map_err(spec_err("image index"))?;
    let index_json = canonical_json(&index);

    // `docker load` reads manifest.json (its own format) and ignores index.json.
    let docker_manifest = serde_json::json!([{
        "Config": blob_path(&config_json),
        "RepoTags": [format!("{repository}:{tag}")],
        "Layers": [blob_path(&layer)],
    }]);
    let docker_manifest_json = canonical_json(&docker_manifest);

    let entries = vec![
        Entry::file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        Entry::file("index.json", 0o644, index_json),
        Entry::file("manifest.json", 0o644, docker_manifest_json),
        Entry::dir("blobs", 0o755, 0),
        Entry::dir("blobs/sha256", 0o755, 0),
        Entry::file(&blob_path(&config_json), 0o644, config_json.clone()),
        Entry::file(&blob_path(&manifest_json), 0o644, manifest_json.clone()),
        Entry::file(&blob_path(&layer), 0o644, layer),
    ];
    let archive = tar_bytes(entries, spec.epoch)?;
    Ok(Image { archive, manifest_digest: sha256(&manifest_json), config_digest: sha256(&config_json) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn references_split_on_the_tag_not_the_registry_port() {
        assert_eq!(reference("orders", "abc"), "localhost/orders:abc");
        assert_eq!(reference("orders", "ghcr.io/acme/orders:1.2"), "ghcr.io/acme/orders:1.2");
        assert_eq!(split_reference("localhost:5000/orders:v1").unwrap(), ("localhost:5000/orders", "v1"));
        assert!(split_reference("localhost:5000/orders").is_err());
        assert!(split_reference("orders:").is_err());
    }
}
