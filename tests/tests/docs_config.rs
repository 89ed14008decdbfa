//! The module's configuration as documented (docs/commands.md and docs/operations.md, "Module
//! configuration"): every parameter the server has, each one's default, and its range, whose
//! bounds the server accepts and whose outsides it refuses.

use rlock_tests::*;
use std::collections::BTreeMap;

/// `parameter -> (default, range)` from the table under `## Module configuration` in `file`.
fn documented(file: &str) -> BTreeMap<String, (String, String)> {
    let text = std::fs::read_to_string(workspace_root().join(file)).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Module configuration"))
        .unwrap_or_else(|| panic!("{file}: no `## Module configuration` section"));
    let mut rows = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, default, range, _, _] = cells[..] else {
            continue;
        };
        let Some(name) = name
            .strip_prefix("`rlock.")
            .and_then(|n| n.strip_suffix('`'))
        else {
            continue;
        };
        rows.insert(
            format!("rlock.{name}"),
            (default.trim_matches('`').to_string(), range.to_string()),
        );
    }
    assert!(rows.len() >= 8, "{file}: the table: {rows:?}");
    rows
}

fn config_set(c: &mut redis::Connection, name: &str, value: &str) -> Result<(), String> {
    let v = raw(c, &cmd!("CONFIG", "SET", name, value));
    match error_text(&v) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[test]
fn every_parameter_has_its_documented_default_and_range() {
    let reference = documented("docs/commands.md");
    let operations = documented("docs/operations.md");
    assert_eq!(
        reference, operations,
        "the two tables give the same defaults and ranges"
    );
    let s = Server::start();
    let mut c = s.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("rlock.*")
        .query(&mut c)
        .unwrap();
    let server: BTreeMap<String, String> = got
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    assert_eq!(
        server.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>(),
        "every parameter of the server is documented, and no other"
    );
    for (name, (default, range)) in &reference {
        assert_eq!(&server[name], default, "{name}: default");
        if range == "`yes`, `no`" {
            for v in ["no", "yes"] {
                assert_eq!(config_set(&mut c, name, v), Ok(()), "{name} {v}");
            }
            assert!(config_set(&mut c, name, "maybe").is_err(), "{name} maybe");
            continue;
        }
        let (lo, hi) = range
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?)))
            .unwrap_or_else(|| panic!("{name}: range `{range}` is not `min-max`"));
        for ok in [lo, hi] {
            assert_eq!(
                config_set(&mut c, name, &ok.to_string()),
                Ok(()),
                "{name}: {ok} is in its documented range {range}"
            );
        }
        for bad in [lo - 1, hi + 1] {
            assert!(
                config_set(&mut c, name, &bad.to_string()).is_err(),
                "{name}: {bad} is outside its documented range {range}, yet accepted"
            );
        }
        assert_eq!(config_set(&mut c, name, default), Ok(()));
    }
}
