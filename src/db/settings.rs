//! The keyspace settings an open may not change by accident: those that change what the
//! stored data means or how it is read, as RocksDB's OPTIONS file checks merge operator
//! names and prefix extractors. Settings that only shape new tables change freely.

use crate::options::KeyspaceOptions;
use crate::version::edit::{CallbackNames, KeyspaceDef, DEFAULT_KEYSPACE};
use crate::{Error, Result};

/// Fails with [`Error::SettingMismatch`] if `given` differs from what `recorded` holds in a
/// checked setting. A read-only open records nothing and compacts nothing, so it refuses only
/// a merge operator other than the recorded one, which would make its reads wrong; one
/// without the operator fails on the reads that need it instead.
pub(crate) fn check(
    keyspace: &str,
    recorded: &KeyspaceDef,
    given: &KeyspaceOptions,
    read_only: bool,
) -> Result<()> {
    let mismatch = |setting, recorded: String, given: String| {
        Err(Error::SettingMismatch { keyspace: keyspace.to_string(), setting, recorded, given })
    };
    let names = CallbackNames::of(given);
    if let Some(rec) = &recorded.callbacks {
        let missing_read_only = read_only && names.merge_operator.is_none();
        if rec.merge_operator != names.merge_operator && !missing_read_only {
            let show = |n: &Option<String>| n.as_ref().map_or("none".into(), |n| format!("{n:?}"));
            return mismatch(
                "merge_operator",
                show(&rec.merge_operator),
                show(&names.merge_operator),
            );
        }
    }
    if read_only {
        return Ok(());
    }
    let (was, is) = (recorded.opts.default_ttl, given.default_ttl);
    if was != is {
        let show = |t: Option<std::time::Duration>| {
            t.map_or("none".into(), |t| format!("{} ms", t.as_millis()))
        };
        return mismatch("default_ttl", show(was), show(is));
    }
    // The default keyspace's extractor is known only from a manifest that records the
    // callbacks too; a named keyspace's always was recorded.
    let prefix_known = recorded.id != DEFAULT_KEYSPACE || recorded.callbacks.is_some();
    let (was, is) = (recorded.opts.prefix_extractor, given.prefix_extractor);
    if prefix_known && was != is {
        let show = |e: Option<crate::PrefixExtractor>| e.map_or("none".into(), |e| e.name());
        return mismatch("prefix_extractor", show(was), show(is));
    }
    if let Some(rec) = &recorded.callbacks {
        if rec.compaction_filter != names.compaction_filter {
            let show = |n: &Option<String>| match n.as_deref() {
                None => "none".to_string(),
                Some("") => "an unnamed filter".to_string(),
                Some(n) => format!("{n:?}"),
            };
            return mismatch(
                "compaction_filter",
                show(&rec.compaction_filter),
                show(&names.compaction_filter),
            );
        }
    }
    Ok(())
}
