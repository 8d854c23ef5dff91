//! The OCI archive writer (`etl_gen::cli::image`) without a build or a container runtime:
//! reproducible digests, the exact layer contents and owners, the config, and that every
//! reference in index.json / manifest.json points at a blob with that size and digest.

use std::collections::BTreeMap;
use std::io::Read as _;

use etl_gen::cli::image::{Image, ImageSpec, sha256, write};
use serde_json::Value;

const BINARY: &[u8] = b"\x7fELF not really a binary, but bytes to package";
const CA: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn spec(epoch: u64) -> ImageSpec<'static> {
    let labels: BTreeMap<String, String> = [
        ("io.etl-rs.pipeline", "orders"),
        ("io.etl-rs.config-hash", "0123456789abcdef"),
        ("io.etl-rs.version", "0.1.0"),
        ("org.opencontainers.image.title", "orders"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    ImageSpec {
        binary: BINARY,
        name: "orders",
        reference: "localhost/orders:0123456789abcdef",
        ca_bundle: CA,
        admin_port: Some(9464),
        labels,
        epoch,
    }
}

/// One tar entry as the tests look at it.
#[derive(Debug)]
struct Entry {
    uid: u64,
    gid: u64,
    mode: u32,
    mtime: u64,
    is_dir: bool,
    data: Vec<u8>,
}

fn untar(bytes: &[u8]) -> BTreeMap<String, Entry> {
    let mut archive = tar::Archive::new(bytes);
    let mut out = BTreeMap::new();
    let mut order = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let h = entry.header().clone();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        order.push(path.clone());
        out.insert(
            path,
            Entry {
                uid: h.uid().unwrap(),
                gid: h.gid().unwrap(),
                mode: h.mode().unwrap(),
                mtime: h.mtime().unwrap(),
                is_dir: h.entry_type().is_dir(),
                data,
            },
        );
    }
    // Sorted entries are part of what makes the bytes reproducible.
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "tar entries are written in sorted order");
    out
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The blob a descriptor points at, after checking its size and digest.
fn blob<'a>(files: &'a BTreeMap<String, Entry>, descriptor: &Value) -> &'a [u8] {
    let digest = descriptor["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").unwrap();
    let data = &files[&format!("blobs/sha256/{hex}")].data;
    assert_eq!(descriptor["size"].as_u64().unwrap(), data.len() as u64, "size of {digest}");
    assert_eq!(sha256(data), digest, "the blob's content has the digest that names it");
    data
}

struct Parts {
    archive: BTreeMap<String, Entry>,
    manifest: Value,
    config: Value,
    layer: BTreeMap<String, Entry>,
    layer_tar: Vec<u8>,
}

fn open(image: &Image) -> Parts {
    let archive = untar(&image.archive);
    let index = json(&archive["index.json"].data);
    assert_eq!(index["schemaVersion"], 2);
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    assert_eq!(manifests[0]["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifests[0]["digest"], image.manifest_digest.as_str());
    let manifest = json(blob(&archive, &manifests[0]));
    let config_bytes = blob(&archive, &manifest["config"]);
    assert_eq!(sha256(config_bytes), image.config_digest);
    let config = json(config_bytes);
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one layer");
    assert_eq!(layers[0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
    let mut layer_tar = Vec::new();
    flate2::read::GzDecoder::new(blob(&archive, &layers[0])).read_to_end(&mut layer_tar).unwrap();
    let layer = untar(&layer_tar);
    Parts { archive, manifest, config, layer, layer_tar }
}

#[test]
fn the_same_input_gives_the_same_bytes_and_digest() {
    let a = write(&spec(0)).unwrap();
    let b = write(&spec(0)).unwrap();
    assert_eq!(a.manifest_digest, b.manifest_digest);
    assert_eq!(a.archive, b.archive, "the whole archive is byte-identical");
    assert!(a.manifest_digest.starts_with("sha256:") && a.manifest_digest.len() == 7 + 64);
    // A different epoch (SOURCE_DATE_EPOCH) or binary is a different image.
    assert_ne!(write(&spec(1_700_000_000)).unwrap().manifest_digest, a.manifest_digest);
    let other = ImageSpec { binary: b"other", ..spec(0) };
    assert_ne!(write(&other).unwrap().manifest_digest, a.manifest_digest);
}

#[test]
fn the_layer_holds_exactly_the_binary_and_the_runtime_files() {
    let parts = open(&write(&spec(0)).unwrap());
    let paths: Vec<&str> = parts.layer.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "etc/",
            "etc/group",
            "etc/hosts",
            "etc/nsswitch.conf",
            "etc/passwd",
            "etc/ssl/",
            "etc/ssl/certs/",
            "etc/ssl/certs/ca-certificates.crt",
            "home/",
            "home/nonroot/",
            "orders",
            "tmp/",
        ]
    );
    let l = &parts.layer;
    assert_eq!(l["orders"].data, BINARY);
    assert_eq!((l["orders"].uid, l["orders"].mode), (0, 0o755), "root-owned: the process cannot rewrite it");
    assert!(l["tmp/"].is_dir);
    assert_eq!(l["tmp/"].mode, 0o1777, "/tmp is sticky and world-writable");
    assert_eq!((l["home/nonroot/"].uid, l["home/nonroot/"].gid), (65532, 65532));
    assert_eq!(l["etc/ssl/certs/ca-certificates.crt"].data, CA);
    assert_eq!(String::from_utf8_lossy(&l["etc/nsswitch.conf"].data).lines().next(), Some("hosts: files dns"));
    assert!(String::from_utf8_lossy(&l["etc/hosts"].data).starts_with("127.0.0.1\tlocalhost\n"));
    assert!(String::from_utf8_lossy(&l["etc/passwd"].data).contains("nonroot:x:65532:65532:"));
    assert!(String::from_utf8_lossy(&l["etc/group"].data).contains("nonroot:x:65532:"));
    for (path, e) in l.iter().chain(parts.archive.iter()) {
        assert_eq!(e.mtime, 0, "{path}: fixed timestamp");
        if path != "home/nonroot/" {
            assert_eq!((e.uid, e.gid), (0, 0), "{path}: fixed owner");
        }
    }
    // The config's diff_id is the digest of the uncompressed layer.
    assert_eq!(parts.config["rootfs"]["diff_ids"][0], sha256(&parts.layer_tar).as_str());
}

#[test]
fn the_config_runs_the_binary_as_nonroot() {
    let parts = open(&write(&spec(1_700_000_000)).unwrap());
    let c = &parts.config;
    assert_eq!(c["os"], "linux");
    assert_eq!(c["created"], "2023-11-14T22:13:20Z", "SOURCE_DATE_EPOCH, not the clock");
    assert_eq!(c["config"]["User"], "65532:65532");
    assert_eq!(c["config"]["Entrypoint"], serde_json::json!(["/orders"]));
    assert!(c["config"]["ExposedPorts"].get("9464/tcp").is_some());
    assert_eq!(c["config"]["Labels"]["io.etl-rs.config-hash"], "0123456789abcdef");
    assert_eq!(c["config"]["Labels"]["io.etl-rs.pipeline"], "orders");
    let history = c["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["created"], "2023-11-14T22:13:20Z");
    assert!(history[0]["created_by"].as_str().unwrap().starts_with("etl-gen image"));
    assert_eq!(parts.manifest["schemaVersion"], 2);
    // No port when the pipeline listens on a port chosen at run time.
    let none = open(&write(&ImageSpec { admin_port: None, ..spec(0) }).unwrap());
    assert!(none.config["config"].get("ExposedPorts").is_none());
}

#[test]
fn index_and_docker_manifest_name_the_image_and_its_blobs() {
    let image = write(&spec(0)).unwrap();
    let parts = open(&image);
    let archive = &parts.archive;
    assert_eq!(json(&archive["oci-layout"].data)["imageLayoutVersion"], "1.0.0");
    let index = json(&archive["index.json"].data);
    let annotations = &index["manifests"][0]["annotations"];
    assert_eq!(annotations["org.opencontainers.image.ref.name"], "0123456789abcdef");
    assert_eq!(annotations["io.containerd.image.name"], "localhost/orders:0123456789abcdef");

    let docker = json(&archive["manifest.json"].data);
    let docker = &docker.as_array().unwrap()[0];
    assert_eq!(docker["RepoTags"], serde_json::json!(["localhost/orders:0123456789abcdef"]));
    let config_path = docker["Config"].as_str().unwrap();
    assert_eq!(config_path, format!("blobs/sha256/{}", image.config_digest.strip_prefix("sha256:").unwrap()));
    let layer_digest = parts.manifest["layers"][0]["digest"].as_str().unwrap();
    assert_eq!(docker["Layers"], serde_json::json!([format!("blobs/sha256/{}", &layer_digest[7..])]));
    // Every blob in the archive is named by its own digest, and nothing else is there.
    let blobs: Vec<&String> = archive.keys().filter(|p| p.starts_with("blobs/sha256/") && p.len() > 13).collect();
    assert_eq!(blobs.len(), 3, "config, manifest, layer: {blobs:?}");
    for path in blobs {
        assert_eq!(sha256(&archive[path].data), format!("sha256:{}", &path[13..]));
    }
    let top: Vec<&str> = archive.keys().map(String::as_str).filter(|p| !p.starts_with("blobs/")).collect();
    assert_eq!(top, ["index.json", "manifest.json", "oci-layout"]);
}

#[test]
fn a_bare_tag_and_a_full_reference_both_work() {
    assert_eq!(etl_gen::cli::image::reference("orders", "v1"), "localhost/orders:v1");
    let image = write(&ImageSpec { reference: "registry.example:5000/team/orders:2024-05", ..spec(0) }).unwrap();
    let archive = untar(&image.archive);
    let index = json(&archive["index.json"].data);
    assert_eq!(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "2024-05");
    let docker = json(&archive["manifest.json"].data);
    assert_eq!(docker[0]["RepoTags"][0], "registry.example:5000/team/orders:2024-05");
    assert!(write(&ImageSpec { reference: "no-tag", ..spec(0) }).is_err());
}
