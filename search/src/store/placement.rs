//! Which of the SQLite store's files holds a cluster's objects.
//!
//! SQLite lets one connection write a file at a time, and at a million objects that
//! one writer thread was the whole indexer's bound (benches/results/search.md): a
//! thread ran alone two thirds of the time. So the store keeps its objects in several
//! files, each with its own writer, and every object of a cluster in one of them: the
//! indexer's batches (one cluster and type each) go to one writer, the writers run in
//! parallel, and a search asks each file that may hold its clusters and merges the
//! pages ([`super::Store::search`]).
//!
//! A cluster is placed once, in the file holding the fewest clusters, and the placement
//! is written to the first file (`placements`) before any of its objects is, so a
//! restart finds every object where it left it, whatever `--sqlite-files` says then.
//! A purged cluster (a member that left) keeps its file, marked purged: it no longer
//! counts when a new cluster is placed, and if it comes back its objects go where any
//! other handle (the search server's) still looks for them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A search naming clusters this handle has not seen placed reads the recorded
/// placements again at most this often (each such search would otherwise re-read them).
pub(crate) const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// A recorded placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) file: usize,
    /// The cluster's objects were purged (it left the fleet).
    pub(crate) purged: bool,
}

/// Where each cluster's objects are, and which file a new cluster goes to.
pub(crate) struct Placement {
    /// Files the store has (a cluster placed in any of them is found).
    files: usize,
    map: parking_lot::RwLock<HashMap<String, Placed>>,
    /// Held while a new cluster is placed (its placement is written first).
    pub(crate) placing: tokio::sync::Mutex<()>,
    /// When the recorded placements were last read for a search ([`RELOAD_EVERY`]).
    reloaded: parking_lot::Mutex<Option<Instant>>,
}

/// The file holding the fewest of the `placed` clusters (their files), the first of
/// equals.
pub(crate) fn least_loaded(files: usize, placed: impl IntoIterator<Item = usize>) -> usize {
    let mut counts = vec![0usize; files.max(1)];
    for p in placed {
        if let Some(c) = counts.get_mut(p) {
            *c += 1;
        }
    }
    (0..counts.len()).min_by_key(|&i| counts[i]).unwrap_or(0)
}

/// How many files a store opens: as many as asked, and at least every file a
/// recorded placement names (a store made with more files keeps them).
pub(crate) fn files_needed(asked: usize, placed: impl IntoIterator<Item = usize>) -> usize {
    placed
        .into_iter()
        .map(|p| p + 1)
        .fold(asked.max(1), usize::max)
}

impl Placement {
    pub(crate) fn new(files: usize, placed: impl IntoIterator<Item = (String, Placed)>) -> Self {
        Placement {
            files,
            map: parking_lot::RwLock::new(placed.into_iter().collect()),
            placing: tokio::sync::Mutex::new(()),
            reloaded: parking_lot::Mutex::new(None),
        }
    }

    /// The file of a placed cluster (purged or not: a search there finds what is).
    pub(crate) fn of(&self, cluster: &str) -> Option<usize> {
        self.map.read().get(cluster).map(|p| p.file)
    }

    /// The file of a placed cluster that was not purged since (writes go there
    /// without recording anything).
    pub(crate) fn live(&self, cluster: &str) -> Option<usize> {
        self.map
            .read()
            .get(cluster)
            .filter(|p| !p.purged)
            .map(|p| p.file)
    }

    /// The file a new cluster goes to: the one holding the fewest clusters that were
    /// not purged.
    pub(crate) fn choose(&self) -> usize {
        let map = self.map.read();
        least_loaded(
            self.files,
            map.values().filter(|p| !p.purged).map(|p| p.file),
        )
    }

    /// Records a placement (once written to the first file), live.
    pub(crate) fn record(&self, cluster: &str, file: usize) {
        let placed = Placed {
            file,
            purged: false,
        };
        self.map.write().insert(cluster.to_string(), placed);
    }

    /// Marks a placed cluster purged (once written to the first file).
    pub(crate) fn mark_purged(&self, cluster: &str) {
        if let Some(p) = self.map.write().get_mut(cluster) {
            p.purged = true;
        }
    }

    /// Whether a search may read the recorded placements again now (not within
    /// [`RELOAD_EVERY`] of the last time); if so, now is the last time.
    pub(crate) fn may_reload(&self) -> bool {
        let mut last = self.reloaded.lock();
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < RELOAD_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Adds the placements read from the first file (another process placed clusters
    /// since this one opened the store); returns how many are in files this handle did
    /// not open (not added). A cluster this handle knows keeps what it knows: rows read
    /// before a purge of this handle's committed must not make the cluster live again.
    pub(crate) fn reload(&self, placed: impl IntoIterator<Item = (String, Placed)>) -> usize {
        let mut map = self.map.write();
        let mut beyond = 0;
        for (c, p) in placed {
            if p.file < self.files {
                map.entry(c).or_insert(p);
            } else {
                beyond += 1;
            }
        }
        beyond
    }

    /// Files this handle opened.
    pub(crate) fn files(&self) -> usize {
        self.files
    }

    /// The files of those of `clusters` that are placed, in order, once each.
    pub(crate) fn files_of<'a>(
        &self,
        clusters: impl IntoIterator<Item = &'a String>,
    ) -> Vec<usize> {
        let map = self.map.read();
        let mut out: Vec<usize> = clusters
            .into_iter()
            .filter_map(|c| map.get(c.as_str()).map(|p| p.file))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_new_cluster_goes_to_the_file_with_the_fewest() {
        for (files, placed, want) in [
            (1, vec![], 0),
            (1, vec![0, 0, 0], 0),
            (4, vec![], 0),
            (4, vec![0], 1),
            (4, vec![0, 1, 2], 3),
            (4, vec![0, 1, 2, 3], 0),
            (4, vec![0, 0, 1, 2, 3, 3], 1),
            (3, vec![2, 2, 1], 0),
            // a placement beyond the files (cannot happen: files_needed) is ignored
            (2, vec![0, 5], 1),
        ] {
            assert_eq!(
                least_loaded(files, placed.clone()),
                want,
                "{files} {placed:?}"
            );
        }
    }

    #[test]
    fn a_store_keeps_every_file_a_placement_names() {
        assert_eq!(files_needed(4, []), 4);
        assert_eq!(files_needed(0, []), 1);
        assert_eq!(files_needed(2, [0, 3, 1]), 4);
        assert_eq!(files_needed(8, [0, 3, 1]), 8);
    }

    proptest! {
        /// Placed one after the other, clusters spread evenly: no file holds two more
        /// than another.
        #[test]
        fn clusters_placed_in_turn_are_spread_evenly(files in 1usize..9, clusters in 0usize..40) {
            let p = Placement::new(files, []);
            for i in 0..clusters {
                let f = p.choose();
                prop_assert!(f < files);
                p.record(&format!("c{i}"), f);
            }
            let mut counts = vec![0usize; files];
            for f in p.map.read().values() {
                counts[f.file] += 1;
            }
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            prop_assert!(max - min <= 1, "{counts:?}");
        }
    }

    #[test]
    fn files_of_lists_placed_clusters_files_once() {
        let p = Placement::new(3, [live("a", 2), live("b", 0), live("c", 2)]);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(p.files_of(&names(&["a", "b", "c", "zz"])), vec![0, 2]);
        assert_eq!(p.files_of(&names(&["zz"])), Vec::<usize>::new());
        assert_eq!(p.reload([live("zz", 1), live("far", 7)]), 1);
        assert_eq!(p.files_of(&names(&["zz", "far"])), vec![1]);
        // what this handle knows stays: a reload read before its purge of a committed
        p.mark_purged("a");
        assert_eq!(p.reload([live("a", 2)]), 0);
        assert_eq!(p.live("a"), None);
    }

    fn live(cluster: &str, file: usize) -> (String, Placed) {
        let placed = Placed {
            file,
            purged: false,
        };
        (cluster.to_string(), placed)
    }

    #[test]
    fn purged_clusters_do_not_count_and_keep_their_file() {
        let p = Placement::new(2, [live("a", 0), live("b", 0), live("c", 1)]);
        assert_eq!(p.choose(), 1);
        p.mark_purged("a");
        p.mark_purged("b");
        // file 0 holds no live cluster now
        assert_eq!(p.choose(), 0);
        assert_eq!(p.of("a"), Some(0));
        assert_eq!(p.live("a"), None);
        assert_eq!(p.live("c"), Some(1));
        // back again: same file, counted again
        p.record("a", 0);
        assert_eq!(p.live("a"), Some(0));
        assert_eq!(p.choose(), 0);
        p.record("b", 0);
        assert_eq!(p.choose(), 1);
        // a purge of a cluster never placed changes nothing
        p.mark_purged("zz");
        assert_eq!(p.of("zz"), None);
    }

    #[test]
    fn searches_read_the_placements_again_at_most_once_a_second() {
        let p = Placement::new(1, []);
        assert!(p.may_reload());
        assert!(!p.may_reload());
        *p.reloaded.lock() = Some(Instant::now() - RELOAD_EVERY);
        assert!(p.may_reload());
        assert!(!p.may_reload());
    }
}
