//! A token bucket (sans-IO: the caller passes `now`) emulating one SSD direction's bandwidth, so
//! that this host's page cache and fast disk do not hide the I/O of the emulated optimizer node.
//!
//! The bucket admits a request of `bytes` at once if it holds that many tokens, and otherwise
//! says how long to wait; tokens refill at `rate` bytes per second up to `burst` bytes. A request
//! larger than the burst is admitted by going into debt (the next requests wait for it), so a
//! sequence of requests never exceeds `rate` on average over more than `burst / rate` seconds.

use std::time::{Duration, Instant};

/// One direction of one emulated SSD.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// `rate` in bytes per second; `burst` in bytes (the bucket starts full).
    pub fn new(rate: f64, burst: f64) -> TokenBucket {
        TokenBucket {
            rate: rate.max(1.0),
            burst: burst.max(1.0),
            tokens: burst.max(1.0),
            last: None,
        }
    }

    /// A bucket for `mbps` MB/s (10^6 bytes) with a 4 ms burst (a few requests' worth, like an
    /// SSD's internal parallelism absorbing a short burst).
    pub fn mbps(mbps: f64) -> TokenBucket {
        let rate = mbps * 1e6;
        TokenBucket::new(rate, (rate * 0.004).max(4096.0))
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        self.last = Some(now);
    }

    /// Charge `bytes` at `now`; returns how long the caller must wait before the transfer counts
    /// as done (zero when the bucket had the tokens).
    pub fn take(&mut self, now: Instant, bytes: u64) -> Duration {
        self.refill(now);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_run_rate_is_the_configured_rate() {
        // 100 MB/s, 4 ms burst = 400 kB; push 100 requests of 1 MB back to back, each starting
        // when the previous wait ends: 100 MB takes 1 s minus the initial burst.
        let mut b = TokenBucket::mbps(100.0);
        let t0 = Instant::now();
        let mut now = t0;
        for _ in 0..100 {
            now += b.take(now, 1_000_000);
        }
        let secs = (now - t0).as_secs_f64();
        assert!((secs - (1.0 - 0.004)).abs() < 1e-6, "{secs}");
    }

    #[test]
    fn burst_is_admitted_without_waiting_and_refills() {
        let mut b = TokenBucket::new(1000.0, 500.0);
        let t0 = Instant::now();
        assert_eq!(b.take(t0, 500), Duration::ZERO);
        // empty now: 100 bytes need 0.1 s
        let w = b.take(t0, 100);
        assert!((w.as_secs_f64() - 0.1).abs() < 1e-9, "{w:?}");
        // after 0.6 s the debt of 100 is paid and 500 (capped) available
        let later = t0 + Duration::from_millis(700);
        assert_eq!(b.take(later, 500), Duration::ZERO);
        assert!(b.take(later, 1) > Duration::ZERO);
    }
}
