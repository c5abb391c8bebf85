//! The address ranges member-supplied URLs may not reach: [`FORBIDDEN_RANGES`], the [`Cidr`]
//! networks they are written in, and [`forbidden`], which names the range an address falls in.
//!
//! The table is the one place these ranges are listed: the HTTP and git guards of this crate
//! check against it, and a network sandbox can turn the same table into its firewall rules.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network: an address and the number of leading bits that name the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network's first address (bits past the prefix are zero).
    address: IpAddr,
    /// Leading bits that must match: at most 32 for IPv4, 128 for IPv6.
    prefix: u8,
}

impl Cidr {
    /// An IPv4 network; bits past `prefix` are cleared.
    pub const fn v4(octets: [u8; 4], prefix: u8) -> Cidr {
        let prefix = if prefix > 32 { 32 } else { prefix };
        let bits = u32::from_be_bytes(octets) & mask32(prefix);
        Cidr { address: IpAddr::V4(Ipv4Addr::from_bits(bits)), prefix }
    }

    /// An IPv6 network given as eight 16-bit groups; bits past `prefix` are cleared.
    pub const fn v6(segments: [u16; 8], prefix: u8) -> Cidr {
        let prefix = if prefix > 128 { 128 } else { prefix };
        let mut bits: u128 = 0;
        let mut index = 0;
        while index < 8 {
            bits = (bits << 16) | segments[index] as u128;
            index += 1;
        }
        Cidr { address: IpAddr::V6(Ipv6Addr::from_bits(bits & mask128(prefix))), prefix }
    }

    /// The network of one address alone (`/32` or `/128`).
    pub const fn host(address: IpAddr) -> Cidr {
        match address {
            IpAddr::V4(_) => Cidr { address, prefix: 32 },
            IpAddr::V6(_) => Cidr { address, prefix: 128 },
        }
    }

    /// The network's first address.
    pub const fn address(&self) -> IpAddr {
        self.address
    }

    /// The prefix length in bits.
    pub const fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this network (an IPv4 address never lies in an IPv6 network, nor
    /// the other way round).
    pub const fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, ip) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => ip.to_bits() & mask32(self.prefix) == network.to_bits(),
            (IpAddr::V6(network), IpAddr::V6(ip)) => ip.to_bits() & mask128(self.prefix) == network.to_bits(),
            _ => false,
        }
    }
}

const fn mask32(prefix: u8) -> u32 {
    if prefix == 0 { 0 } else { u32::MAX << (32 - prefix as u32) }
}

const fn mask128(prefix: u8) -> u128 {
    if prefix == 0 { 0 } else { u128::MAX << (128 - prefix as u32) }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// Why a text is not a network.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP address or a network such as 10.0.0.0/8")]
pub struct InvalidCidr(pub String);

impl FromStr for Cidr {
    type Err = InvalidCidr;

    /// `10.1.0.0/16`, `fd00::/8`, or one address (`10.1.2.3`, `::1`). Bits past the prefix
    /// must be zero, so a typo such as `10.1.2.3/8` is refused rather than widened.
    fn from_str(text: &str) -> Result<Cidr, InvalidCidr> {
        let invalid = || InvalidCidr(text.to_owned());
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => {
                let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
                (address.parse::<IpAddr>().map_err(|_| invalid())?, Some(prefix))
            }
            None => (text.parse::<IpAddr>().map_err(|_| invalid())?, None),
        };
        let cidr = match (address, prefix) {
            (_, None) => Cidr::host(address),
            (IpAddr::V4(v4), Some(prefix @ 0..=32)) => Cidr::v4(v4.octets(), prefix),
            (IpAddr::V6(v6), Some(prefix @ 0..=128)) => Cidr::v6(v6.segments(), prefix),
            _ => return Err(invalid()),
        };
        if cidr.address != address {
            return Err(invalid());
        }
        Ok(cidr)
    }
}

/// One forbidden network and the reason shown when an address falls in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForbiddenRange {
    pub network: Cidr,
    /// A short phrase, e.g. `"loopback"`, shown as "not a public address (loopback)".
    pub reason: &'static str,
}

const fn range(network: Cidr, reason: &'static str) -> ForbiddenRange {
    ForbiddenRange { network, reason }
}

/// Every network a member-supplied URL may not reach unless the operator allows it: this
/// host and its neighbours (loopback, private, shared, link-local with the cloud metadata
/// address), addresses that are not one host (unspecified, multicast, broadcast), ranges that
/// are reserved or only for documentation and benchmarks, and IPv6 forms that embed an IPv4
/// address (mapped, compatible, NAT64, 6to4, Teredo) and could carry any of the above. The
/// first range an address falls in names the reason, so narrower ranges come first.
pub const FORBIDDEN_RANGES: &[ForbiddenRange] = &[
    range(Cidr::v4([0, 0, 0, 0], 8), "unspecified (this network)"),
    range(Cidr::v4([10, 0, 0, 0], 8), "private"),
    range(Cidr::v4([100, 64, 0, 0], 10), "shared (carrier-grade NAT)"),
    range(Cidr::v4([127, 0, 0, 0], 8), "loopback"),
    range(Cidr::v4([169, 254, 0, 0], 16), "link-local (cloud metadata)"),
    range(Cidr::v4([172, 16, 0, 0], 12), "private"),
    range(Cidr::v4([192, 0, 0, 0], 24), "reserved (IETF protocol assignments)"),
    range(Cidr::v4([192, 0, 2, 0], 24), "documentation"),
    range(Cidr::v4([192, 88, 99, 0], 24), "reserved (6to4 relay)"),
    range(Cidr::v4([192, 168, 0, 0], 16), "private"),
    range(Cidr::v4([198, 18, 0, 0], 15), "benchmarking"),
    range(Cidr::v4([198, 51, 100, 0], 24), "documentation"),
    range(Cidr::v4([203, 0, 113, 0], 24), "documentation"),
    range(Cidr::v4([224, 0, 0, 0], 4), "multicast"),
    range(Cidr::v4([255, 255, 255, 255], 32), "broadcast"),
    range(Cidr::v4([240, 0, 0, 0], 4), "reserved"),
    range(Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    range(Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    range(Cidr::v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), "IPv4-mapped"),
    range(Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 96), "IPv4-compatible"),
    range(Cidr::v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), "NAT64"),
    range(Cidr::v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "NAT64 (local use)"),
    range(Cidr::v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "discard-only"),
    range(Cidr::v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "Teredo"),
    range(Cidr::v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "documentation"),
    range(Cidr::v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4"),
    range(Cidr::v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "documentation"),
    range(Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "unique local (private)"),
    range(Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    range(Cidr::v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "site-local"),
    range(Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
];

/// The reason `ip` is forbidden (the first of [`FORBIDDEN_RANGES`] it falls in), or `None`
/// for an address member-supplied URLs may reach.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    FORBIDDEN_RANGES.iter().find(|range| range.network.contains(ip)).map(|range| range.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(text: &str) -> Option<&'static str> {
        forbidden(text.parse().unwrap())
    }

    #[test]
    fn hosts_and_neighbours_are_forbidden() {
        assert_eq!(reason("127.0.0.1"), Some("loopback"));
        assert_eq!(reason("127.255.255.254"), Some("loopback"));
        assert_eq!(reason("0.0.0.0"), Some("unspecified (this network)"));
        assert_eq!(reason("10.1.2.3"), Some("private"));
        assert_eq!(reason("172.16.0.1"), Some("private"));
        assert_eq!(reason("172.31.255.255"), Some("private"));
        assert_eq!(reason("192.168.1.1"), Some("private"));
        assert_eq!(reason("100.64.0.1"), Some("shared (carrier-grade NAT)"));
        assert_eq!(reason("169.254.169.254"), Some("link-local (cloud metadata)"));
        assert_eq!(reason("224.0.0.1"), Some("multicast"));
        assert_eq!(reason("255.255.255.255"), Some("broadcast"));
        assert_eq!(reason("240.0.0.1"), Some("reserved"));
        assert_eq!(reason("192.0.2.7"), Some("documentation"));
        assert_eq!(reason("198.19.0.1"), Some("benchmarking"));
        assert_eq!(reason("::1"), Some("loopback"));
        assert_eq!(reason("::"), Some("unspecified"));
        assert_eq!(reason("::ffff:127.0.0.1"), Some("IPv4-mapped"));
        assert_eq!(reason("::ffff:8.8.8.8"), Some("IPv4-mapped"));
        assert_eq!(reason("::127.0.0.1"), Some("IPv4-compatible"));
        assert_eq!(reason("64:ff9b::7f00:1"), Some("NAT64"));
        assert_eq!(reason("2002:7f00:1::1"), Some("6to4"));
        assert_eq!(reason("fd00:ec2::254"), Some("unique local (private)"));
        assert_eq!(reason("fc00::1"), Some("unique local (private)"));
        assert_eq!(reason("fe80::1"), Some("link-local"));
        assert_eq!(reason("ff02::1"), Some("multicast"));
    }

    #[test]
    fn public_addresses_are_not() {
        for public in ["8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "169.253.0.1", "11.0.0.1", "2606:4700::1111", "2a00:1450::1"] {
            assert_eq!(reason(public), None, "{public}");
        }
    }

    #[test]
    fn networks_parse_strictly() {
        assert_eq!("10.0.0.0/8".parse::<Cidr>().unwrap(), Cidr::v4([10, 0, 0, 0], 8));
        assert_eq!("10.1.2.3".parse::<Cidr>().unwrap().to_string(), "10.1.2.3/32");
        assert_eq!("fd00::/8".parse::<Cidr>().unwrap().to_string(), "fd00::/8");
        assert_eq!("::1".parse::<Cidr>().unwrap().prefix(), 128);
        for bad in ["10.1.2.3/8", "10.0.0.0/33", "fd00::/129", "example.com", "10.0.0.0/", "/8", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        let network = Cidr::v4([192, 168, 0, 0], 16);
        assert!(network.contains("192.168.44.1".parse().unwrap()));
        assert!(!network.contains("192.169.0.1".parse().unwrap()));
        assert!(!network.contains("::ffff:192.168.0.1".parse().unwrap()));
        assert!(Cidr::v4([0, 0, 0, 0], 0).contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn the_table_is_well_formed() {
        for range in FORBIDDEN_RANGES {
            let reparsed: Cidr = range.network.to_string().parse().unwrap();
            assert_eq!(reparsed, range.network);
            assert!(!range.reason.is_empty());
        }
    }
}
