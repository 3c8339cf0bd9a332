################################################################################
#
# linemq
#
################################################################################

LINEMQ_VERSION = $(call qstrip,$(BR2_PACKAGE_LINEMQ_VERSION))
# The tarball "make dist" writes; it carries vendor/ already, so the
# golang infrastructure's own vendoring (and its -go2 name) do not apply.
# check-package RemoveDefaultPackageSourceVariable
LINEMQ_SOURCE = linemq-$(LINEMQ_VERSION).tar.gz
LINEMQ_SITE = $(call qstrip,$(BR2_PACKAGE_LINEMQ_DIST_DIR))
LINEMQ_SITE_METHOD = file
# Built locally from the repository: no fixed hash to check
# ("make dist" writes its sha256 beside it).
BR_NO_CHECK_HASH_FOR += $(LINEMQ_SOURCE)
LINEMQ_GOMOD = github.com/linemq/linemq
LINEMQ_BUILD_TARGETS = cmd/linemq
LINEMQ_LDFLAGS = -s -w -X main.version=$(LINEMQ_VERSION)
# A static binary, as "make cross" builds it.
LINEMQ_GO_ENV = CGO_ENABLED=0

define LINEMQ_USERS
	linemq -1 linemq -1 * - - gpio linemq MQTT broker
endef

define LINEMQ_INSTALL_CONFIG
	$(INSTALL) -D -m 0644 $(@D)/docs/linemq.example.yaml \
		$(TARGET_DIR)/usr/share/linemq/linemq.example.yaml
endef
LINEMQ_POST_INSTALL_TARGET_HOOKS += LINEMQ_INSTALL_CONFIG

define LINEMQ_INSTALL_INIT_SYSTEMD
	$(INSTALL) -D -m 0644 $(@D)/systemd/linemq.service \
		$(TARGET_DIR)/usr/lib/systemd/system/linemq.service
	$(INSTALL) -D -m 0644 $(@D)/systemd/linemq.sysusers \
		$(TARGET_DIR)/usr/lib/sysusers.d/linemq.conf
	$(INSTALL) -D -m 0644 $(@D)/systemd/linemq.tmpfiles \
		$(TARGET_DIR)/usr/lib/tmpfiles.d/linemq.conf
	$(INSTALL) -D -m 0644 $(@D)/systemd/60-linemq.rules \
		$(TARGET_DIR)/usr/lib/udev/rules.d/60-linemq.rules
endef

$(eval $(golang-package))
