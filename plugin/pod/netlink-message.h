// Netlink requests written into one buffer, for wire-pod.c: a request's header and fixed struct,
// its attributes and nests (their lengths set as they grow, padding zeroed), and a write's
// numbering (only its last request asks for an ack, as plugin/netlink/socket.ts exec does).
// Static functions in a header: wire-pod.c is the only file that includes it. bench/kernel-floor.c
// keeps an encoder of its own on purpose: it is the reference kni is timed against, and one
// shared with kni would hide whatever extra work kni's encoder did.
#ifndef KNI_NETLINK_MESSAGE_H
#define KNI_NETLINK_MESSAGE_H

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdint.h>
#include <string.h>

#define MSG_CAP 4096

struct msg { uint8_t b[MSG_CAP]; size_t len; int count; int overflow; };

static void *room(struct msg *m, size_t n) {
    if (m->len + n > MSG_CAP) { m->overflow = 1; return NULL; }
    void *p = m->b + m->len;
    memset(p, 0, n);
    m->len += n;
    return p;
}

/** Empties the buffer for the next write. */
static void reset(struct msg *m) { m->len = 0, m->count = 0, m->overflow = 0; }

static size_t align4(size_t n) { return (n + 3) & ~(size_t)3; }

/** Starts a request (its header, then its fixed struct); the header's length is set as it grows. */
static struct nlmsghdr *start(struct msg *m, uint16_t type, uint16_t flags, const void *fixed, size_t len) {
    size_t at = m->len;
    struct nlmsghdr *h = room(m, NLMSG_HDRLEN);
    void *f = room(m, align4(len));
    if (!h || !f) return NULL;
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | flags;
    memcpy(f, fixed, len);
    h->nlmsg_len = (uint32_t)(m->len - at);
    m->count++;
    return h;
}

static void grow(struct msg *m, struct nlmsghdr *h) {
    if (h) h->nlmsg_len = (uint32_t)(m->b + m->len - (uint8_t *)h);
}

static size_t attr(struct msg *m, struct nlmsghdr *h, uint16_t type, const void *data, size_t len) {
    size_t at = m->len;
    struct nlattr *a = room(m, align4(NLA_HDRLEN + len));
    if (!a || !h) return at;
    a->nla_len = (uint16_t)(NLA_HDRLEN + len);
    a->nla_type = type;
    if (len) memcpy((uint8_t *)a + NLA_HDRLEN, data, len);
    grow(m, h);
    return at;
}

static void attr_u8(struct msg *m, struct nlmsghdr *h, uint16_t type, uint8_t v) { attr(m, h, type, &v, 1); }
static void attr_u32(struct msg *m, struct nlmsghdr *h, uint16_t type, uint32_t v) { attr(m, h, type, &v, 4); }
static void attr_str(struct msg *m, struct nlmsghdr *h, uint16_t type, const char *s) { attr(m, h, type, s, strlen(s) + 1); }
static void attr_ip(struct msg *m, struct nlmsghdr *h, uint16_t type, int family, const uint8_t *a) { attr(m, h, type, a, family == 4 ? 4 : 16); }

/** A nest (or an attribute whose payload follows); nest_end sets its length. */
static size_t nest(struct msg *m, struct nlmsghdr *h, uint16_t type, int nested) { return attr(m, h, nested ? type | NLA_F_NESTED : type, NULL, 0); }
static void nest_end(struct msg *m, size_t at) {
    if (!m->overflow) ((struct nlattr *)(m->b + at))->nla_len = (uint16_t)(m->len - at);
}

static struct nlmsghdr *ifinfo(struct msg *m, uint16_t type, int family, int index, unsigned flags, unsigned change) {
    struct ifinfomsg ifi = {.ifi_family = (uint8_t)family, .ifi_index = index, .ifi_flags = flags, .ifi_change = change};
    return start(m, type, 0, &ifi, sizeof ifi);
}

/** Numbers the write's requests from seq and asks an ack of the last only (socket.ts exec). */
static void number(struct msg *m, uint32_t seq) {
    size_t o = 0;
    for (int i = 0; o < m->len; i++) {
        struct nlmsghdr *h = (struct nlmsghdr *)(m->b + o);
        h->nlmsg_seq = seq + (uint32_t)i;
        if (i == m->count - 1) h->nlmsg_flags |= NLM_F_ACK;
        o += NLMSG_ALIGN(h->nlmsg_len);
    }
}

#endif
