include $(sort $(wildcard $(BR2_EXTERNAL_LINEMQ_PATH)/package/*/*.mk))
