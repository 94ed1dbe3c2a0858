//! Structural URL policy: every URL the service accepts passes here before any payment.
//!
//! The check is purely structural (no DNS, no network), so it is cheap, deterministic and
//! can run before a caller is charged: the URL must parse (WHATWG, via the `url` crate),
//! be absolute `https://` on the default port, carry no userinfo and no fragment, and name
//! either a public IP literal or a fully qualified public-looking DNS name (no `localhost`,
//! `.local`, `.internal`, single-label, trailing-dot, ... names).
//! A name that passes can still resolve to a private address, so this is NOT an SSRF guard
//! on its own: the fetcher must re-check every resolved DNS answer with [`ip_is_public`]
//! (and connect only to a checked address), and must re-run [`check_public_https_url`] on
//! every redirect target.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// Maximum accepted URL length in bytes (raw input and normalized serialization).
pub const MAX_URL_LEN: usize = 2048;

/// Why a URL was refused. [`UrlPolicyError::code`] gives the stable machine code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlPolicyError {
    /// Unparseable, relative, empty, too long, no host, or containing whitespace/control chars.
    #[error("invalid URL: {0}")]
    Invalid(&'static str),
    /// Any scheme other than `https`.
    #[error("only https:// URLs are accepted")]
    SchemeNotHttps,
    /// An explicit port other than 443.
    #[error("explicit port {0} is not allowed; only the default HTTPS port (443) is accepted")]
    PortNotAllowed(u16),
    /// A username or password (even empty) in the authority.
    #[error("URLs containing a username or password ('user@host') are not accepted")]
    UserinfoNotAllowed,
    /// A fragment (`#...`), even an empty one.
    #[error("URLs containing a fragment ('#...') are not accepted")]
    FragmentNotAllowed,
    /// An IP-literal host that is not globally routable public unicast.
    #[error("the host is an IP address that is not publicly routable")]
    HostNotPublic,
    /// A reserved, internal, single-label or malformed host name.
    #[error("the host name is reserved, internal or not a fully qualified public name")]
    HostNameNotAllowed,
    /// A host name ending in '.'.
    #[error("host names ending in '.' are not accepted")]
    HostTrailingDot,
}

impl UrlPolicyError {
    /// Stable machine-readable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "url_invalid",
            Self::SchemeNotHttps => "url_scheme_not_https",
            Self::PortNotAllowed(_) => "url_port_not_allowed",
            Self::UserinfoNotAllowed => "url_userinfo_not_allowed",
            Self::FragmentNotAllowed => "url_fragment_not_allowed",
            Self::HostNotPublic => "url_host_not_public",
            Self::HostNameNotAllowed => "url_host_name_not_allowed",
            Self::HostTrailingDot => "url_host_trailing_dot",
        }
    }
}

/// Domain suffixes that never name a public service. A host is refused when it equals one
/// of these or ends with `.` + one of these (compared case-insensitively).
const BLOCKED_DOMAIN_SUFFIXES: &[&str] = &[
    "localhost",   // RFC 6761: loopback
    "local",       // RFC 6762: mDNS link-local names
    "internal",    // ICANN-reserved private-use TLD
    "home.arpa",   // RFC 8375: home networks
    "localdomain", // conventional /etc/hosts alias of localhost
    "invalid",     // RFC 6761: guaranteed not to resolve
    "onion",       // RFC 7686: Tor hidden services, not reachable via DNS
];

/// IPv4 ranges that are not globally routable public unicast: (network, prefix length).
const IPV4_NON_PUBLIC: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8), // "this network" (RFC 791), incl. 0.0.0.0
    (Ipv4Addr::new(10, 0, 0, 0), 8), // private (RFC 1918)
    (Ipv4Addr::new(100, 64, 0, 0), 10), // shared address space / CGNAT (RFC 6598)
    (Ipv4Addr::new(127, 0, 0, 0), 8), // loopback (RFC 1122)
    (Ipv4Addr::new(169, 254, 0, 0), 16), // link-local, cloud metadata endpoints (RFC 3927)
    (Ipv4Addr::new(172, 16, 0, 0), 12), // private (RFC 1918)
    (Ipv4Addr::new(192, 0, 0, 0), 24), // IETF protocol assignments (RFC 6890)
    (Ipv4Addr::new(192, 0, 2, 0), 24), // documentation TEST-NET-1 (RFC 5737)
    (Ipv4Addr::new(192, 88, 99, 0), 24), // deprecated 6to4 relay anycast (RFC 7526)
    (Ipv4Addr::new(192, 168, 0, 0), 16), // private (RFC 1918)
    (Ipv4Addr::new(198, 18, 0, 0), 15), // benchmarking (RFC 2544)
    (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation TEST-NET-2 (RFC 5737)
    (Ipv4Addr::new(203, 0, 113, 0), 24), // documentation TEST-NET-3 (RFC 5737)
    (Ipv4Addr::new(224, 0, 0, 0), 4), // multicast (RFC 5771)
    (Ipv4Addr::new(240, 0, 0, 0), 4), // reserved for future use (RFC 1112)
    (Ipv4Addr::new(255, 255, 255, 255), 32), // limited broadcast (inside 240/4; listed explicitly)
];

/// The only IPv6 block that may be public: global unicast 2000::/3 (RFC 4291).
const IPV6_GLOBAL_UNICAST: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

/// IPv6 ranges that are not public: (network, prefix length). Entries outside 2000::/3 are
/// already refused by the global-unicast rule; they are listed so the policy is auditable
/// in one place.
const IPV6_NON_PUBLIC: &[(Ipv6Addr, u8)] = &[
    // --- inside 2000::/3 ---
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23), // IETF protocol assignments (RFC 2928): Teredo 2001::/32, benchmarking, ORCHID, ...
    (Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0), 32), // documentation (RFC 3849)
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16), // 6to4 (RFC 3056): embeds arbitrary IPv4, deprecated; refused outright
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20), // documentation (RFC 9637)
    // --- outside 2000::/3 (listed for auditability) ---
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 128), // unspecified ::
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128), // loopback ::1
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96), // IPv4-mapped (RFC 4291)
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96),  // IPv4-compatible, deprecated (RFC 4291)
    (Ipv6Addr::new(0x0064, 0xff9b, 0, 0, 0, 0, 0, 0), 96), // NAT64 well-known prefix (RFC 6052)
    (Ipv6Addr::new(0x0064, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // NAT64 local-use prefix (RFC 8215)
    (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64), // discard-only (RFC 6666)
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local (RFC 4193)
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local (RFC 4291)
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local, deprecated (RFC 3879)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast (RFC 4291)
];

/// Checks `input` against the structural policy and returns the parsed URL.
///
/// Checks, in order (the first failure wins): length/whitespace/control characters and
/// WHATWG parsing (`url_invalid`), scheme (`url_scheme_not_https`), the raw `https://`
/// separator (`url_invalid`), userinfo (`url_userinfo_not_allowed`), port
/// (`url_port_not_allowed`), fragment (`url_fragment_not_allowed`), then the host.
/// IP-literal hosts in any WHATWG spelling (`127.1`, `0x7f000001`, `2130706433`, ...) are
/// normalized by the parser and checked with [`ip_is_public`]. No DNS lookup is made.
pub fn check_public_https_url(input: &str) -> Result<Url, UrlPolicyError> {
    use UrlPolicyError as E;

    if input.is_empty() {
        return Err(E::Invalid("empty"));
    }
    if input.len() > MAX_URL_LEN {
        return Err(E::Invalid("longer than 2048 bytes"));
    }
    // The WHATWG parser silently strips tabs/newlines and surrounding spaces; refuse them
    // instead so that what we check is exactly what the caller sent.
    if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(E::Invalid("contains whitespace or control characters"));
    }

    let url = Url::parse(input).map_err(|_| E::Invalid("not a valid absolute URL"))?;

    if url.scheme() != "https" {
        return Err(E::SchemeNotHttps);
    }
    if url.as_str().len() > MAX_URL_LEN {
        return Err(E::Invalid("longer than 2048 bytes once normalized"));
    }

    // Raw-text checks. This does not parse the URL (the `url` crate did that); it only
    // confirms the spelling is the canonical `https://` form and, mirroring the WHATWG
    // authority state, that no '@' appears in the authority. The parser drops an empty
    // userinfo (`https://@host/`, `https://:@host/`), so the raw text is the only witness.
    let authority =
        raw_authority(input).ok_or(E::Invalid("expected 'https://' followed by a host"))?;
    if url.username() != "" || url.password().is_some() || authority.contains('@') {
        return Err(E::UserinfoNotAllowed);
    }

    // `port()` is None for the scheme default, so an explicit `:443` is accepted.
    if let Some(port) = url.port() {
        return Err(E::PortNotAllowed(port));
    }

    // '#' can only ever start the fragment, so the raw check is exact; it also catches the
    // empty fragment (`https://h/#`).
    if url.fragment().is_some() || input.contains('#') {
        return Err(E::FragmentNotAllowed);
    }

    match url.host() {
        None => return Err(E::Invalid("no host")),
        Some(Host::Ipv4(ip)) => {
            if !ip_is_public(IpAddr::V4(ip)) {
                return Err(E::HostNotPublic);
            }
        }
        Some(Host::Ipv6(ip)) => {
            if !ip_is_public(IpAddr::V6(ip)) {
                return Err(E::HostNotPublic);
            }
        }
        Some(Host::Domain(domain)) => check_domain(domain)?,
    }

    Ok(url)
}

/// The raw authority text (between `https://` and the first `/`, `\`, `?` or `#`), or
/// `None` if the input does not use exactly two forward slashes after the scheme. The
/// WHATWG parser tolerates `https:host`, `https:/host`, `https:\\host` and `https:///host`
/// for special schemes; we refuse those spellings.
fn raw_authority(input: &str) -> Option<&str> {
    let (_scheme, rest) = input.split_once(':')?;
    let after_slashes = rest.trim_start_matches(['/', '\\']);
    let separator = rest.get(..rest.len() - after_slashes.len())?;
    if separator != "//" {
        return None;
    }
    let end = after_slashes
        .find(['/', '\\', '?', '#'])
        .unwrap_or(after_slashes.len());
    after_slashes.get(..end)
}

/// Host-name rules for `Host::Domain` (already lowercased and IDNA/punycode-encoded by the
/// parser).
fn check_domain(domain: &str) -> Result<(), UrlPolicyError> {
    use UrlPolicyError as E;

    // Checked first and on the raw host text: `localhost.` is a trailing-dot error.
    if domain.ends_with('.') {
        return Err(E::HostTrailingDot);
    }
    let domain = domain.to_ascii_lowercase();
    if domain.is_empty() || domain.len() > 253 {
        return Err(E::HostNameNotAllowed);
    }
    let mut labels = 0usize;
    for label in domain.split('.') {
        labels += 1;
        let shape_ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !shape_ok {
            return Err(E::HostNameNotAllowed);
        }
    }
    // Single-label names (`https://intranet/`) resolve through search domains, i.e. locally.
    if labels < 2 {
        return Err(E::HostNameNotAllowed);
    }
    let blocked = BLOCKED_DOMAIN_SUFFIXES.iter().any(|suffix| {
        domain == *suffix
            || domain
                .strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.'))
    });
    if blocked {
        return Err(E::HostNameNotAllowed);
    }
    Ok(())
}

/// True when the address is globally routable public unicast.
///
/// Used for IP-literal URL hosts and, by the fetcher, for every resolved DNS answer.
///
/// * IPv4: public unless in the `IPV4_NON_PUBLIC` table (private, loopback, CGNAT, link-local,
///   documentation, benchmarking, multicast, reserved, broadcast, ...).
/// * IPv6: public only inside global unicast `2000::/3` and outside the `IPV6_NON_PUBLIC` table
///   (documentation, IETF protocol assignments incl. Teredo/ORCHID, 6to4).
/// * IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is **always** refused, even when the embedded
///   IPv4 is public (e.g. `::ffff:8.8.8.8`): a legitimate public host has no reason to be
///   written that way, and refusing it removes a whole class of dual-stack bypasses. The
///   same holds for IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4
///   (`2002::/16`) addresses.
pub fn ip_is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => ipv4_is_public(v4),
        IpAddr::V6(v6) => ipv6_is_public(v6),
    }
}

fn ipv4_is_public(ip: Ipv4Addr) -> bool {
    // Stable std predicates first (defence in depth), then the full table.
    if ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
    {
        return false;
    }
    let bits = u32::from(ip);
    !IPV4_NON_PUBLIC
        .iter()
        .any(|&(net, len)| v4_in_prefix(bits, u32::from(net), len))
}

fn ipv6_is_public(ip: Ipv6Addr) -> bool {
    // IPv4-mapped: refused regardless of the embedded address (see `ip_is_public`).
    if ip.to_ipv4_mapped().is_some() {
        return false;
    }
    // Stable std predicates first (defence in depth), then the tables.
    if ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
    {
        return false;
    }
    let bits = u128::from(ip);
    let (global, global_len) = IPV6_GLOBAL_UNICAST;
    if !v6_in_prefix(bits, u128::from(global), global_len) {
        return false;
    }
    !IPV6_NON_PUBLIC
        .iter()
        .any(|&(net, len)| v6_in_prefix(bits, u128::from(net), len))
}

fn v4_in_prefix(addr: u32, net: u32, len: u8) -> bool {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(len.min(32)))
        .unwrap_or(0);
    addr & mask == net & mask
}

fn v6_in_prefix(addr: u128, net: u128, len: u8) -> bool {
    let mask = u128::MAX
        .checked_shl(128 - u32::from(len.min(128)))
        .unwrap_or(0);
    addr & mask == net & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy is structural (https on its default port), so the manifest's URL
    /// allowlists can only state it: a machine allowing another scheme or port would
    /// promise what the policy refuses.
    #[test]
    fn the_manifests_url_allowlists_state_this_policy() {
        let manifest = &crate::catalog::embedded::MANIFEST;
        let mut stated = 0;
        for machine in &manifest.machines {
            let listed = |name: &str| {
                machine
                    .allowlists
                    .get(name)
                    .and_then(serde_json::Value::as_array)
                    .cloned()
            };
            // `ports` marks a URL allowlist; VM09/VM10's `schemes` are x402 schemes.
            if let Some(ports) = listed("ports") {
                assert_eq!(ports, [serde_json::json!(443)], "{}", machine.machine);
                let schemes = listed("schemes");
                assert_eq!(schemes, Some(vec!["https".into()]), "{}", machine.machine);
                stated += 1;
            }
            if let Some(port) = machine.limit("allowed_port") {
                assert_eq!(port, 443, "{}", machine.machine);
            }
        }
        assert!(
            stated >= 5,
            "the URL-taking machines declare their allowlists"
        );
        let refused = check_public_https_url("https://example.com:8443/");
        assert!(matches!(refused, Err(UrlPolicyError::PortNotAllowed(8443))));
    }

    /// Spellings that must be refused, with the expected stable code.
    const REJECTED: &[(&str, &str)] = &[
        // --- invalid ---
        ("", "url_invalid"),
        ("not a url", "url_invalid"),
        ("/relative/path", "url_invalid"),
        ("relative/path", "url_invalid"),
        ("//example.com/", "url_invalid"),
        ("https://", "url_invalid"),
        ("https:///", "url_invalid"),
        ("https://exa mple.com/", "url_invalid"),
        (" https://example.com/", "url_invalid"),
        ("https://example.com/ ", "url_invalid"),
        ("https://exam\tple.com/", "url_invalid"),
        ("https://example.com/\n", "url_invalid"),
        ("https://exa\u{0}mple.com/", "url_invalid"),
        ("https://example.com/\u{7f}", "url_invalid"),
        ("https://example.com/\u{a0}x", "url_invalid"),
        ("https://example.com/\u{2003}x", "url_invalid"),
        ("https://[::1/", "url_invalid"),
        ("https://[fe80::1%25eth0]/", "url_invalid"),
        ("https://example.com:99999/", "url_invalid"),
        ("https://1.2.3.4.5/", "url_invalid"),
        ("https://256.0.0.1/", "url_invalid"),
        ("https://example.123/", "url_invalid"),
        ("https://user%40example.com/", "url_invalid"),
        ("https:example.com", "url_invalid"),
        ("https:/example.com/", "url_invalid"),
        ("https:\\\\example.com\\", "url_invalid"),
        ("https:///example.com/", "url_invalid"),
        ("https:/\\example.com/", "url_invalid"),
        // --- scheme ---
        ("http://example.com/", "url_scheme_not_https"),
        ("HTTP://example.com/", "url_scheme_not_https"),
        ("ftp://example.com/", "url_scheme_not_https"),
        ("ws://example.com/", "url_scheme_not_https"),
        ("wss://example.com/", "url_scheme_not_https"),
        ("file:///etc/passwd", "url_scheme_not_https"),
        ("gopher://127.0.0.1:6379/_", "url_scheme_not_https"),
        ("javascript:alert(1)", "url_scheme_not_https"),
        ("data:text/plain,hi", "url_scheme_not_https"),
        ("mailto:a@example.com", "url_scheme_not_https"),
        ("httpss://example.com/", "url_scheme_not_https"),
        ("http:example.com", "url_scheme_not_https"),
        // --- userinfo ---
        ("https://user@example.com/", "url_userinfo_not_allowed"),
        ("https://user:pass@example.com/", "url_userinfo_not_allowed"),
        ("https://:pass@example.com/", "url_userinfo_not_allowed"),
        ("https://@example.com/", "url_userinfo_not_allowed"),
        ("https://:@example.com/", "url_userinfo_not_allowed"),
        (
            "https://example.com@evil.example/",
            "url_userinfo_not_allowed",
        ),
        ("https://a@b@example.com/", "url_userinfo_not_allowed"),
        ("https://user@127.0.0.1/", "url_userinfo_not_allowed"),
        // --- port ---
        ("https://example.com:80/", "url_port_not_allowed"),
        ("https://example.com:444/", "url_port_not_allowed"),
        ("https://example.com:8443/", "url_port_not_allowed"),
        ("https://example.com:0/", "url_port_not_allowed"),
        ("https://example.com:65535/", "url_port_not_allowed"),
        ("https://8.8.8.8:22/", "url_port_not_allowed"),
        // --- fragment ---
        ("https://example.com/#frag", "url_fragment_not_allowed"),
        ("https://example.com/#", "url_fragment_not_allowed"),
        ("https://example.com#", "url_fragment_not_allowed"),
        ("https://example.com/?q=a#x", "url_fragment_not_allowed"),
        // --- non-public IPv4 literals, in WHATWG spellings ---
        ("https://127.0.0.1/", "url_host_not_public"),
        ("https://127.1/", "url_host_not_public"),
        ("https://2130706433/", "url_host_not_public"),
        ("https://0x7f000001/", "url_host_not_public"),
        ("https://0177.0.0.1/", "url_host_not_public"),
        ("https://0x7f.0.0.1/", "url_host_not_public"),
        ("https://0x7f.1/", "url_host_not_public"),
        ("https://127.0.0.1./", "url_host_not_public"),
        ("https://%31%32%37.0.0.1/", "url_host_not_public"),
        (
            "https://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}/",
            "url_host_not_public",
        ),
        ("https://127.0.0.1:443/", "url_host_not_public"),
        ("https://10.0.0.1/", "url_host_not_public"),
        ("https://172.16.5.4/", "url_host_not_public"),
        ("https://172.31.255.255/", "url_host_not_public"),
        ("https://192.168.1.1/", "url_host_not_public"),
        (
            "https://169.254.169.254/latest/meta-data/",
            "url_host_not_public",
        ),
        ("https://100.64.0.1/", "url_host_not_public"),
        ("https://100.127.255.255/", "url_host_not_public"),
        ("https://0.0.0.0/", "url_host_not_public"),
        ("https://0/", "url_host_not_public"),
        ("https://224.0.0.1/", "url_host_not_public"),
        ("https://239.255.255.250/", "url_host_not_public"),
        ("https://240.0.0.1/", "url_host_not_public"),
        ("https://255.255.255.255/", "url_host_not_public"),
        ("https://192.0.0.1/", "url_host_not_public"),
        ("https://192.0.2.1/", "url_host_not_public"),
        ("https://192.88.99.1/", "url_host_not_public"),
        ("https://198.18.0.1/", "url_host_not_public"),
        ("https://198.19.255.255/", "url_host_not_public"),
        ("https://198.51.100.7/", "url_host_not_public"),
        ("https://203.0.113.9/", "url_host_not_public"),
        // --- non-public IPv6 literals ---
        ("https://[::1]/", "url_host_not_public"),
        ("https://[::]/", "url_host_not_public"),
        ("https://[0:0:0:0:0:0:0:1]/", "url_host_not_public"),
        ("https://[fe80::1]/", "url_host_not_public"),
        ("https://[fc00::1]/", "url_host_not_public"),
        ("https://[fd12:3456::1]/", "url_host_not_public"),
        ("https://[fec0::1]/", "url_host_not_public"),
        ("https://[::ffff:127.0.0.1]/", "url_host_not_public"),
        ("https://[::ffff:7f00:1]/", "url_host_not_public"),
        ("https://[::ffff:169.254.169.254]/", "url_host_not_public"),
        ("https://[::ffff:8.8.8.8]/", "url_host_not_public"),
        ("https://[::127.0.0.1]/", "url_host_not_public"),
        ("https://[ff02::1]/", "url_host_not_public"),
        ("https://[2001:db8::1]/", "url_host_not_public"),
        ("https://[2001::1]/", "url_host_not_public"),
        ("https://[2001:10::1]/", "url_host_not_public"),
        ("https://[2002:7f00:1::1]/", "url_host_not_public"),
        ("https://[3fff::1]/", "url_host_not_public"),
        ("https://[64:ff9b::7f00:1]/", "url_host_not_public"),
        ("https://[64:ff9b:1::1]/", "url_host_not_public"),
        ("https://[100::1]/", "url_host_not_public"),
        // --- host names ---
        ("https://localhost/", "url_host_name_not_allowed"),
        ("https://LOCALHOST/", "url_host_name_not_allowed"),
        ("https://%6c%6fcalhost/", "url_host_name_not_allowed"),
        ("https://foo.localhost/", "url_host_name_not_allowed"),
        ("https://printer.local/", "url_host_name_not_allowed"),
        ("https://db.internal/", "url_host_name_not_allowed"),
        (
            "https://metadata.google.internal/computeMetadata/v1/",
            "url_host_name_not_allowed",
        ),
        ("https://nas.home.arpa/", "url_host_name_not_allowed"),
        ("https://box.localdomain/", "url_host_name_not_allowed"),
        (
            "https://localhost.localdomain/",
            "url_host_name_not_allowed",
        ),
        ("https://nothing.invalid/", "url_host_name_not_allowed"),
        (
            "https://abcdefghijklmnop.onion/",
            "url_host_name_not_allowed",
        ),
        ("https://intranet/", "url_host_name_not_allowed"),
        ("https://a..b.example/", "url_host_name_not_allowed"),
        ("https://.example.com/", "url_host_name_not_allowed"),
        ("https://-bad.example.com/", "url_host_name_not_allowed"),
        ("https://ex$mple.com/", "url_host_name_not_allowed"),
        // --- trailing dot ---
        ("https://example.com./", "url_host_trailing_dot"),
        ("https://localhost./", "url_host_trailing_dot"),
        ("https://intranet./", "url_host_trailing_dot"),
        ("https://localhost%2e/", "url_host_trailing_dot"),
        ("https://localhost\u{3002}/", "url_host_trailing_dot"),
    ];

    /// URLs that must pass the policy.
    const ACCEPTED: &[&str] = &[
        "https://example.com/",
        "https://example.com",
        "https://example.com:443/a?b=c",
        "https://example.com:/x",
        "https://EXAMPLE.com/Path",
        "HTTPS://example.com/",
        "https://sub.domain.example.org/x/y.html",
        "https://93.184.216.34/",
        "https://8.8.8.8/",
        "https://1.1.1.1/dns-query?name=example.com",
        "https://[2606:4700:4700::1111]/",
        "https://[2001:4860:4860::8888]/",
        "https://xn--bcher-kva.example/",
        "https://bücher.example/",
        "https://a.b.c.d.example.net/path;params?x=1&y=2",
        "https://example.com/%20encoded",
        "https://api.example.com/v1/resource?x=1",
        "https://example.com/@user?mention=a@b",
        "https://my-host_1.example.com/",
        "https://local.example.com/",
        "https://localhost.example.com/",
        "https://example.onion.example.com/",
    ];

    #[test]
    fn rejected_spellings() {
        assert!(REJECTED.len() >= 50, "need at least 50 rejected spellings");
        let mut failures = Vec::new();
        for &(input, expected) in REJECTED {
            match check_public_https_url(input) {
                Ok(url) => failures.push(format!("{input:?}: accepted as {url}")),
                Err(e) if e.code() != expected => failures.push(format!(
                    "{input:?}: got {} ({e}), want {expected}",
                    e.code()
                )),
                Err(_) => {}
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn accepted_urls() {
        assert!(ACCEPTED.len() >= 12, "need at least 12 accepted URLs");
        let mut failures = Vec::new();
        for &input in ACCEPTED {
            if let Err(e) = check_public_https_url(input) {
                failures.push(format!("{input:?}: rejected with {} ({e})", e.code()));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn accepted_urls_are_normalized() {
        let url = check_public_https_url("https://EXAMPLE.com:443/Path").expect("valid");
        assert_eq!(url.as_str(), "https://example.com/Path");
        assert_eq!(url.port(), None);
        let url = check_public_https_url("https://bücher.example/").expect("valid");
        assert_eq!(url.host_str(), Some("xn--bcher-kva.example"));
    }

    #[test]
    fn length_limit() {
        let prefix = "https://example.com/";
        let exact = format!("{prefix}{}", "a".repeat(MAX_URL_LEN - prefix.len()));
        assert_eq!(exact.len(), MAX_URL_LEN);
        assert!(check_public_https_url(&exact).is_ok());

        let over = format!("{exact}a");
        let err = check_public_https_url(&over).expect_err("too long");
        assert_eq!(err.code(), "url_invalid");

        let long = format!("{prefix}{}", "a".repeat(3000 - prefix.len()));
        assert_eq!(long.len(), 3000);
        assert_eq!(
            check_public_https_url(&long).expect_err("too long").code(),
            "url_invalid"
        );

        // Short input that grows past the limit once percent-encoded.
        let grows = format!("{prefix}{}", "é".repeat(1000));
        assert!(grows.len() <= MAX_URL_LEN);
        assert_eq!(
            check_public_https_url(&grows).expect_err("too long").code(),
            "url_invalid"
        );
    }

    #[test]
    fn every_error_has_code_and_message() {
        let all = [
            UrlPolicyError::Invalid("x"),
            UrlPolicyError::SchemeNotHttps,
            UrlPolicyError::PortNotAllowed(80),
            UrlPolicyError::UserinfoNotAllowed,
            UrlPolicyError::FragmentNotAllowed,
            UrlPolicyError::HostNotPublic,
            UrlPolicyError::HostNameNotAllowed,
            UrlPolicyError::HostTrailingDot,
        ];
        let mut codes: Vec<_> = all.iter().map(UrlPolicyError::code).collect();
        for (e, code) in all.iter().zip(&codes) {
            assert!(code.starts_with("url_"));
            assert!(!e.to_string().is_empty());
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len(), "codes must be distinct");
    }

    fn v4(s: &str) -> IpAddr {
        IpAddr::V4(s.parse().expect("test literal"))
    }

    fn v6(s: &str) -> IpAddr {
        IpAddr::V6(s.parse().expect("test literal"))
    }

    #[test]
    fn ipv4_boundaries() {
        let cases = [
            ("0.255.255.255", false),
            ("1.0.0.0", true),
            ("9.255.255.255", true),
            ("10.0.0.0", false),
            ("10.255.255.255", false),
            ("11.0.0.0", true),
            ("100.63.255.255", true),
            ("100.64.0.0", false),
            ("100.127.255.255", false),
            ("100.128.0.0", true),
            ("126.255.255.255", true),
            ("127.0.0.0", false),
            ("127.255.255.255", false),
            ("128.0.0.0", true),
            ("169.253.255.255", true),
            ("169.254.0.0", false),
            ("169.255.0.0", true),
            ("172.15.255.255", true),
            ("172.16.0.0", false),
            ("172.31.255.255", false),
            ("172.32.0.0", true),
            ("191.255.255.255", true),
            ("192.0.0.0", false),
            ("192.0.0.255", false),
            ("192.0.1.0", true),
            ("192.0.2.0", false),
            ("192.0.3.0", true),
            ("192.88.98.255", true),
            ("192.88.99.0", false),
            ("192.88.100.0", true),
            ("192.167.255.255", true),
            ("192.168.0.0", false),
            ("192.169.0.0", true),
            ("198.17.255.255", true),
            ("198.18.0.0", false),
            ("198.19.255.255", false),
            ("198.20.0.0", true),
            ("198.51.99.255", true),
            ("198.51.100.0", false),
            ("198.51.101.0", true),
            ("203.0.112.255", true),
            ("203.0.113.0", false),
            ("203.0.114.0", true),
            ("223.255.255.255", true),
            ("224.0.0.0", false),
            ("239.255.255.255", false),
            ("240.0.0.0", false),
            ("255.255.255.254", false),
            ("255.255.255.255", false),
            ("8.8.8.8", true),
            ("93.184.216.34", true),
        ];
        for (addr, public) in cases {
            assert_eq!(ip_is_public(v4(addr)), public, "{addr}");
        }
    }

    #[test]
    fn ipv6_boundaries() {
        let cases = [
            ("::", false),
            ("::1", false),
            ("::2", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:7f00:1", false),
            ("::ffff:8.8.8.8", false), // IPv4-mapped: refused by design
            ("::8.8.8.8", false),      // IPv4-compatible
            ("64:ff9b::808:808", false),
            ("64:ff9b:1::1", false),
            ("100::1", false),
            ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
            ("2000::", true),
            ("2000::1", true), // inside 2000::/3 and not in any deny range
            ("2001::", false),
            ("2001::1", false), // Teredo
            ("2001:1ff:ffff::1", false),
            ("2001:200::1", true), // first address past 2001::/23
            ("2001:db7:ffff::1", true),
            ("2001:db8::", false),
            ("2001:db8:ffff:ffff::1", false),
            ("2001:db9::1", true),
            ("2001:4860:4860::8888", true),
            ("2001:ffff::1", true),
            ("2002::1", false),
            ("2002:808:808::1", false), // 6to4: refused outright
            ("2003::1", true),
            ("2606:4700::1", true),
            ("2606:4700:4700::1111", true),
            ("3ffe:ffff::1", true),
            ("3fff::", false),
            ("3fff:fff:ffff::1", false),
            ("3fff:1000::1", true),
            ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("4000::1", false),
            ("fc00::1", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("ff02::1", false),
            ("ff0e::1", false),
        ];
        for (addr, public) in cases {
            assert_eq!(ip_is_public(v6(addr)), public, "{addr}");
        }
    }

    #[test]
    fn tables_have_no_host_bits() {
        for &(net, len) in IPV4_NON_PUBLIC {
            let bits = u32::from(net);
            assert!(len <= 32, "{net}/{len}");
            assert!(v4_in_prefix(bits, bits, len));
            let host_mask = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            assert_eq!(bits & host_mask, 0, "{net}/{len} has host bits");
        }
        for &(net, len) in IPV6_NON_PUBLIC.iter().chain([&IPV6_GLOBAL_UNICAST]) {
            let bits = u128::from(net);
            assert!(len <= 128, "{net}/{len}");
            let host_mask = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
            assert_eq!(bits & host_mask, 0, "{net}/{len} has host bits");
        }
    }

    #[test]
    fn every_table_network_is_non_public() {
        for &(net, _) in IPV4_NON_PUBLIC {
            assert!(!ip_is_public(IpAddr::V4(net)), "{net}");
        }
        for &(net, _) in IPV6_NON_PUBLIC {
            assert!(!ip_is_public(IpAddr::V6(net)), "{net}");
        }
    }

    #[test]
    fn prefix_helpers_edge_lengths() {
        assert!(v4_in_prefix(0xdead_beef, 0, 0));
        assert!(v4_in_prefix(0xdead_beef, 0xdead_beef, 32));
        assert!(!v4_in_prefix(0xdead_beef, 0xdead_beee, 32));
        assert!(v6_in_prefix(u128::MAX, 0, 0));
        assert!(v6_in_prefix(1, 1, 128));
        assert!(!v6_in_prefix(1, 0, 128));
    }
}
