//! The track table's life cycle: update matched tracks, age and delete unmatched ones,
//! birth tentative tracks from unmatched detections, and the class vote.
//!
//! Contract: a matched track takes the detection's position (Kalman update), size and
//! heading and one class vote; an unmatched one misses — a tentative track dies on its
//! first miss, a confirmed one after more than `max_misses`. Unmatched detections birth
//! tentative tracks (confirmed after `birth_hits` consecutive hits) with increasing ids
//! while the table has room; existing tracks are never evicted. No allocation, lock or
//! panic; tracks stay in birth order. Cost: O(tracks + detections).

use super::{Track, Tracker};
use crate::kalman::Cv2d;
use crate::types::{class, MAX_DETECTIONS};

/// Initial velocity variance of a new track, (m/s)² (it starts at rest, speed unknown).
const BIRTH_VEL_VAR: f64 = 100.0;

impl Tracker {
    /// Step 5 of [`Tracker::step`]: update matched tracks, age unmatched ones, delete the
    /// dead.
    pub(super) fn update_matched(&mut self) {
        let p = self.params;
        self.det_used = [false; MAX_DETECTIONS];
        for (i, t) in self.tracks.iter_mut().enumerate() {
            t.age = t.age.saturating_add(1);
            let j = self.row_to_col[i];
            match self.dets.get(usize::try_from(j).unwrap_or(usize::MAX)) {
                Some(d) => {
                    self.det_used[j as usize] = true;
                    t.kf.update_along(d.x, d.y, p.meas_var, d.ray, d.ray_var);
                    t.hits = t.hits.saturating_add(1);
                    t.misses = 0;
                    if let Some(v) = t.votes.get_mut(d.class as usize) {
                        *v = v.saturating_add(1);
                    }
                    t.class = majority(&t.votes, d.class);
                    t.yaw = d.yaw;
                    t.length = d.length;
                    t.width = d.width;
                    if t.hits >= p.birth_hits {
                        t.confirmed = true;
                    }
                }
                None => {
                    t.hits = 0;
                    t.misses = t.misses.saturating_add(1);
                }
            }
        }
        let max_misses = p.max_misses;
        self.tracks
            .retain(|t| t.misses == 0 || (t.confirmed && t.misses <= max_misses));
    }

    /// Step 6 of [`Tracker::step`]: birth tentative tracks from unmatched detections.
    pub(super) fn births(&mut self) {
        let p = self.params;
        let birth_hits = p.birth_hits;
        for (j, d) in self.dets.iter().enumerate() {
            if self.det_used[j] {
                continue;
            }
            if self.tracks.is_full() {
                self.stats.births_refused += 1;
                continue;
            }
            let mut votes = [0u32; class::COUNT];
            if let Some(v) = votes.get_mut(d.class as usize) {
                *v = 1;
            }
            let track = Track {
                id: self.next_id,
                kf: Cv2d::new_along(d.x, d.y, p.meas_var, d.ray, d.ray_var, BIRTH_VEL_VAR),
                votes,
                class: d.class,
                yaw: d.yaw,
                length: d.length,
                width: d.width,
                age: 0,
                hits: 1,
                misses: 0,
                confirmed: birth_hits <= 1,
            };
            // Cannot fail: checked is_full above.
            let _ = self.tracks.push(track);
            self.next_id = self.next_id.checked_add(1).unwrap_or(1);
            self.stats.births += 1;
        }
    }
}

/// The class with most votes; ties go to `latest` if it is among the best, else the lowest.
fn majority(votes: &[u32; class::COUNT], latest: u32) -> u32 {
    let best = votes.iter().copied().max().unwrap_or(0);
    if votes.get(latest as usize).copied() == Some(best) {
        return latest;
    }
    votes.iter().position(|&v| v == best).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::super::tests::{det, ego_at, out_buf};
    use super::super::TrackerParams;
    use super::*;
    use crate::types::{Detection, EgoPose, TrackState, MAX_TRACKS};

    #[test]
    fn dropped_detections_do_not_kill_a_track() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        for k in 0..20u64 {
            let ego = ego_at(k, 0.0, 0.0, 0.0);
            let x = 10.0 + 5.0 * k as f64 * 0.1;
            let dets = [det(&ego, x, 2.0, class::CAR)];
            let seen: &[Detection] = if k == 8 || k == 9 { &[] } else { &dets };
            tr.step(seen, &ego);
            let n = tr.write(&mut out);
            if k >= 1 {
                assert_eq!(n, 1, "frame {k}");
                assert_eq!(out[0].id, 1, "frame {k}");
                let expect_misses = match k {
                    8 => 1,
                    9 => 2,
                    _ => 0,
                };
                assert_eq!(out[0].misses, expect_misses);
            }
        }
        // After max_misses + 1 misses it is deleted.
        for k in 20..27u64 {
            tr.step(&[], &ego_at(k, 0.0, 0.0, 0.0));
        }
        assert_eq!(tr.write(&mut out), 0);
        assert!(tr.is_empty());
        assert!(out.iter().all(|t| t.valid == 0));
    }

    #[test]
    fn spurious_single_detection_is_never_confirmed() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        for k in 0..10u64 {
            let ego = ego_at(k, 0.0, 0.0, 0.0);
            // A clutter blip at a different place every frame, far from the others.
            let dets = [det(&ego, 5.0 + 10.0 * k as f64, -8.0, class::PEDESTRIAN)];
            tr.step(&dets, &ego);
            assert_eq!(tr.write(&mut out), 0, "frame {k}");
        }
        assert_eq!(tr.stats().births, 10);
        // Ids are never reused: the next track gets id 11.
        let ego = ego_at(10, 0.0, 0.0, 0.0);
        tr.step(&[det(&ego, 50.0, 50.0, class::CAR)], &ego);
        let ego = ego_at(11, 0.0, 0.0, 0.0);
        tr.step(&[det(&ego, 50.0, 50.0, class::CAR)], &ego);
        assert_eq!(tr.write(&mut out), 1);
        assert_eq!(out[0].id, 11);
    }

    #[test]
    fn capacity_overflow_is_handled() {
        let mut tr = Tracker::new(TrackerParams {
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let mut out = out_buf();
        let grid =
            |ego: &EgoPose, i: usize| det(ego, (i % 10) as f64 * 10.0, (i / 10) as f64 * 10.0, 0);
        // 100 detections on a grid 10 m apart: only MAX_DETECTIONS are used.
        let ego = ego_at(0, 0.0, 0.0, 0.0);
        let many: Vec<Detection> = (0..100).map(|i| grid(&ego, i)).collect();
        tr.step(&many, &ego);
        assert_eq!(tr.len(), MAX_DETECTIONS.min(MAX_TRACKS));
        assert_eq!(tr.stats().detections_dropped, 100 - MAX_DETECTIONS as u64);
        // Next frame: half of them are seen again, plus 32 new ones far away. The table is
        // full of confirmed (coasting) tracks, so the newcomers find no room.
        let ego = ego_at(1, 0.0, 0.0, 0.0);
        let mut next: Vec<Detection> = (0..32).map(|i| grid(&ego, i)).collect();
        next.extend((0..32).map(|i| det(&ego, 500.0 + i as f64 * 10.0, 500.0, 0)));
        tr.step(&next, &ego);
        assert_eq!(tr.stats().births_refused, 32);
        assert_eq!(tr.write(&mut out), MAX_TRACKS);
        assert_eq!(out.iter().filter(|t| t.misses == 1).count(), 32);
        // A small output buffer gets the first tracks only.
        let mut small = [TrackState::default(); 3];
        assert_eq!(tr.write(&mut small), 3);
        assert_eq!(small.map(|t| t.id), [1, 2, 3]);
    }

    #[test]
    fn class_follows_majority_of_detections() {
        let mut tr = Tracker::new(TrackerParams::default());
        let mut out = out_buf();
        let classes = [
            class::CYCLIST,
            class::PEDESTRIAN,
            class::CYCLIST,
            class::PEDESTRIAN,
            class::PEDESTRIAN,
        ];
        for (k, &c) in classes.iter().enumerate() {
            let ego = ego_at(k as u64, 0.0, 0.0, 0.0);
            tr.step(&[det(&ego, 8.0, 1.0, c)], &ego);
        }
        tr.write(&mut out);
        assert_eq!(out[0].class, class::PEDESTRIAN);
        assert_eq!(majority(&[2, 2, 0], 1), 1);
        assert_eq!(majority(&[2, 2, 0], 2), 0);
    }

    #[test]
    fn reset_restarts_ids() {
        let mut tr = Tracker::new(TrackerParams {
            birth_hits: 1,
            ..TrackerParams::default()
        });
        let mut out = out_buf();
        let ego = ego_at(0, 0.0, 0.0, 0.0);
        tr.step(&[det(&ego, 5.0, 0.0, 0)], &ego);
        assert_eq!(tr.write(&mut out), 1);
        tr.reset();
        assert_eq!(tr.write(&mut out), 0);
        tr.step(&[det(&ego, 5.0, 0.0, 0)], &ego);
        tr.write(&mut out);
        assert_eq!(out[0].id, 1);
    }
}
