"""The warm sandbox's zygote: programs run inside the sandbox (never imported by aworld-gym itself)."""
