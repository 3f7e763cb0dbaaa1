"""The proxy's 4.x remoting port (upstream ``proxy/remoting``: RemotingProtocolServer and its
activities): 4.x/5.x remoting clients use the proxy as their NameServer and broker."""
