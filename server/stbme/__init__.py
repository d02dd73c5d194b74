"""ST-BME Sidecar: long-term memory for SillyTavern roleplay chats."""

__version__ = "0.1.0"
