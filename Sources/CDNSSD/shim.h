#ifndef CDNSSD_SHIM_H
#define CDNSSD_SHIM_H

/*
 * DNS-SD (Bonjour) through Avahi's compatibility library, Debian
 * `libavahi-compat-libdnssd-dev`, which installs /usr/include/dns_sd.h and
 * libdns_sd.so. (Its pkg-config file is not used: SwiftPM rejects its
 * -D_REENTRANT flag, and the header is on the default include path.)
 *
 * The API imports cleanly (its constants are enums or plain-integer macros),
 * so this header only includes it.
 *
 * Avahi's implementation, in short (avahi-compat-libdns_sd/compat.c, 0.8):
 * every DNSServiceRef owns a private thread and a D-Bus connection to
 * avahi-daemon; DNSServiceRefSockFD returns one end of a socketpair that
 * becomes readable when that thread has results, and DNSServiceProcessResult
 * runs the reply callbacks on the calling thread. Creating a ref fails at
 * once (kDNSServiceErr_Unknown) when the daemon or the system bus is not
 * reachable; a daemon that goes away later is reported through the reply
 * callbacks with an error code.
 */
#include <dns_sd.h>

#endif
