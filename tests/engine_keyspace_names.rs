//! Issue 9, item 20: keyspace names are validated up front.
//!
//! Before the fix a 257 MiB name was accepted and made the database unopenable ("manifest length
//! out of range"), and a byte-engine keyspace named `c:orders` was deleted by
//! `create_container("orders")` as a leftover of the document layer.

use ebbdb::{ContainerProperties, Database, DefaultTtl, Error, Store};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The message of a 400 (a success is not printed: its value may hold a huge name).
fn bad_request<T>(r: ebbdb::Result<T>) -> String {
    match r {
        Err(Error::BadRequest(m)) => m,
        Err(e) => format!("<expected BadRequest, got {e:?}>"),
        Ok(_) => "<expected BadRequest, got Ok>".to_string(),
    }
}

#[test]
fn huge_keyspace_name_is_refused_and_the_store_stays_openable() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path())?;
        let name = "x".repeat(257 << 20);
        let m = bad_request(store.create_keyspace(&name, DefaultTtl::Off));
        assert_eq!(
            m,
            "keyspace name is 269484032 bytes long; the maximum is 1024 bytes"
        );
        assert!(!store.is_poisoned());
        store
            .create_keyspace("after", DefaultTtl::Off)?
            .put(b"k", b"v")?;
    }
    let store = Store::open(dir.path())?;
    assert_eq!(store.keyspace("after")?.get(b"k")?, Some(b"v".to_vec()));
    Ok(())
}

#[test]
fn keyspace_name_length_limit_is_1024_bytes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path())?;
    store.create_keyspace(&"x".repeat(1024), DefaultTtl::Off)?;
    assert_eq!(
        bad_request(store.create_keyspace(&"y".repeat(1025), DefaultTtl::Off)),
        "keyspace name is 1025 bytes long; the maximum is 1024 bytes"
    );
    assert_eq!(
        bad_request(store.keyspace_or_create(&"y".repeat(1025), DefaultTtl::Off)),
        "keyspace name is 1025 bytes long; the maximum is 1024 bytes"
    );
    Ok(())
}

/// The document layer's names (`__containers`, `c:{id}`) cannot be created or deleted through
/// the byte engine, so the document layer never deletes a keyspace it did not create.
#[test]
fn document_layer_names_are_reserved() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path())?;
        for name in ["c:orders", "__containers", "__mine"] {
            assert_eq!(
                bad_request(store.create_keyspace(name, DefaultTtl::Off)),
                format!(
                    "keyspace name '{name}' is reserved: names beginning with 'c:' or '__' \
                     belong to the document layer"
                ),
            );
            assert!(bad_request(store.keyspace_or_create(name, DefaultTtl::Off))
                .contains("is reserved"));
        }
        store
            .create_keyspace("orders", DefaultTtl::Off)?
            .put(b"k", b"v")?;
    }
    let db = Database::open(dir.path())?;
    let orders = db.create_container(ContainerProperties::new("orders", "/pk"))?;
    // The engine cannot delete the container's keyspace behind the document layer's back.
    assert!(bad_request(db.store().delete_keyspace("c:orders")).contains("is reserved"));
    assert_eq!(orders.count()?, 0);
    // The user's own keyspace is untouched, and still readable through the engine.
    assert_eq!(
        db.store().keyspace("orders")?.get(b"k")?,
        Some(b"v".to_vec())
    );
    // Reading a container's keyspace through the engine stays possible.
    assert_eq!(db.store().keyspace("c:orders")?.len()?, 0);
    Ok(())
}
