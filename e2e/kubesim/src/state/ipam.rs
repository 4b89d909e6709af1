//! ClusterIP and NodePort allocation from a server's own service CIDRs.

use std::collections::HashSet;
use std::net::IpAddr;

/// A parsed CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("CIDR \"{s}\" must look like 10.96.0.0/16"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|e| format!("CIDR \"{s}\": bad address: {e}"))?;
        let prefix: u8 = p
            .parse()
            .map_err(|e| format!("CIDR \"{s}\": bad prefix: {e}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max || prefix + 4 > max {
            return Err(format!("CIDR \"{s}\": prefix must be at most /{}", max - 4));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    fn bits(ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(v) => u32::from(v) as u128,
            IpAddr::V6(v) => u128::from(v),
        }
    }

    fn width(&self) -> u32 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }

    fn mask(&self) -> u128 {
        let w = self.width();
        let host_bits = w - self.prefix as u32;
        let all = if w == 128 {
            u128::MAX
        } else {
            (1u128 << w) - 1
        };
        all & !((1u128 << host_bits) - 1)
    }

    /// True when `ip` is inside the CIDR (same family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && Self::bits(ip) & self.mask() == Self::bits(self.addr) & self.mask()
    }

    fn nth(&self, n: u128) -> IpAddr {
        let v = (Self::bits(self.addr) & self.mask()) + n;
        if self.addr.is_ipv4() {
            IpAddr::V4((v as u32).into())
        } else {
            IpAddr::V6(v.into())
        }
    }

    fn size(&self) -> u128 {
        let host_bits = self.width() - self.prefix as u32;
        if host_bits >= 127 {
            u128::MAX
        } else {
            1u128 << host_bits
        }
    }

    /// `IPv4` or `IPv6`.
    pub fn family(&self) -> &'static str {
        if self.addr.is_ipv4() { "IPv4" } else { "IPv6" }
    }
}

/// Allocations of one server.
#[derive(Debug, Clone)]
pub struct Ipam {
    /// Service CIDRs, primary family first.
    pub cidrs: Vec<Cidr>,
    used: HashSet<IpAddr>,
    node_ports: HashSet<u16>,
}

impl Ipam {
    /// An allocator over `cidrs` (one or two, different families).
    pub fn new(cidrs: Vec<Cidr>) -> Self {
        Ipam {
            cidrs,
            used: HashSet::new(),
            node_ports: HashSet::new(),
        }
    }

    /// The CIDR of a family.
    pub fn cidr(&self, family: &str) -> Option<Cidr> {
        self.cidrs.iter().find(|c| c.family() == family).copied()
    }

    /// Allocates the lowest free address of a family (skipping network and broadcast).
    pub fn allocate(&mut self, family: &str) -> Result<IpAddr, String> {
        let c = self
            .cidr(family)
            .ok_or_else(|| format!("this cluster has no {family} service CIDR"))?;
        let limit = c.size().min(1 << 20);
        for n in 1..limit.saturating_sub(1) {
            let ip = c.nth(n);
            if self.used.insert(ip) {
                return Ok(ip);
            }
        }
        Err(format!(
            "range is full: no free {family} ClusterIP in {}/{}",
            c.addr, c.prefix
        ))
    }

    /// Reserves a requested address.
    pub fn reserve(&mut self, ip: IpAddr) -> Result<(), String> {
        if !self.cidrs.iter().any(|c| c.contains(ip)) {
            let ranges = self
                .cidrs
                .iter()
                .map(|c| format!("{}/{}", c.addr, c.prefix))
                .collect::<Vec<_>>()
                .join(",");
            return Err(format!(
                "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {ranges}"
            ));
        }
        if !self.used.insert(ip) {
            return Err(format!(
                "failed to allocate IP {ip}: provided IP is already allocated"
            ));
        }
        Ok(())
    }

    /// Frees an address.
    pub fn release(&mut self, ip: IpAddr) {
        self.used.remove(&ip);
    }

    /// Allocates a NodePort in 30000–32767, or reserves the requested one.
    pub fn node_port(&mut self, want: Option<u16>) -> Result<u16, String> {
        if let Some(p) = want {
            if !(30000..=32767).contains(&p) {
                return Err(format!(
                    "provided port is not in the valid range. The range of valid ports is 30000-32767 (got {p})"
                ));
            }
            if !self.node_ports.insert(p) {
                return Err(format!("provided port is already allocated ({p})"));
            }
            return Ok(p);
        }
        (30000..=32767)
            .find(|p| self.node_ports.insert(*p))
            .ok_or_else(|| "range is full: no free NodePort".to_string())
    }

    /// Frees a NodePort.
    pub fn release_node_port(&mut self, p: u16) {
        self.node_ports.remove(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_in_order_and_refuses_duplicates() {
        let mut ipam = Ipam::new(vec![
            "10.96.0.0/28".parse().unwrap(),
            "fd00:10:96::/112".parse().unwrap(),
        ]);
        assert_eq!(ipam.allocate("IPv4").unwrap().to_string(), "10.96.0.1");
        assert_eq!(ipam.allocate("IPv6").unwrap().to_string(), "fd00:10:96::1");
        assert!(
            ipam.reserve("10.96.0.1".parse().unwrap())
                .unwrap_err()
                .contains("already allocated")
        );
        assert!(
            ipam.reserve("10.97.0.1".parse().unwrap())
                .unwrap_err()
                .contains("not in the valid range")
        );
        for _ in 0..13 {
            ipam.allocate("IPv4").unwrap();
        }
        assert!(ipam.allocate("IPv4").unwrap_err().contains("range is full"));
        ipam.release("10.96.0.5".parse().unwrap());
        assert_eq!(ipam.allocate("IPv4").unwrap().to_string(), "10.96.0.5");
        assert_eq!(ipam.node_port(None).unwrap(), 30000);
        assert!(ipam.node_port(Some(30000)).is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
    }
}
