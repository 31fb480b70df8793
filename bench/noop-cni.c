/*
 * noop-cni: a CNI plugin that does nothing, the floor npm run bench:containerd sets kni and
 * the reference plugins beside. ADD reads its config and answers an eth0 with a fixed address
 * in the sandbox (containerd's CRI refuses a result without an address on eth0) without
 * touching the kernel; DEL, CHECK, STATUS and GC succeed; VERSION names the versions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void drain_stdin(void) {
  char buf[4096];
  while (read(0, buf, sizeof buf) > 0) {
  }
}

int main(void) {
  const char *cmd = getenv("CNI_COMMAND");
  const char *netns = getenv("CNI_NETNS");
  if (!cmd) cmd = "";
  if (!netns) netns = "";
  if (strcmp(cmd, "VERSION") == 0) {
    printf("{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n");
    return 0;
  }
  drain_stdin();
  if (strcmp(cmd, "ADD") == 0) {
    printf("{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"eth0\",\"sandbox\":\"%s\"}],"
           "\"ips\":[{\"address\":\"10.99.0.2/24\",\"interface\":0}]}\n",
           netns);
  }
  return 0;
}
