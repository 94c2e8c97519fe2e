//! RS256 JWTs for the Firestore tests, signed and verified with *ring* (there through the
//! `firestore` feature). jsonwebtoken's `encode` and `decode` would use its process-wide
//! crypto provider, and syncguard enables none of jsonwebtoken's (Cargo.toml).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::TokenData;
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256, RsaKeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The DER header of a 2048-bit RSA key's SubjectPublicKeyInfo (the rsaEncryption algorithm,
/// then the bit string's tag, length and unused-bits byte): what follows is the PKCS#1
/// `RSAPublicKey` that ring verifies with. The test key is such a key.
const RSA_2048_SPKI_HEADER: [u8; 24] = [
    0x30, 0x82, 0x01, 0x22, 0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01,
    0x01, 0x05, 0x00, 0x03, 0x82, 0x01, 0x0f, 0x00,
];

/// The header and claims of `jwt` once its RS256 signature verifies with the 2048-bit RSA key
/// in `public_pem` (a PEM `PUBLIC KEY`); why not, otherwise. Checks no claim: the tests
/// assert each one.
pub fn verify_rs256<T: DeserializeOwned>(
    jwt: &str,
    public_pem: &str,
) -> Result<TokenData<T>, String> {
    let spki = SubjectPublicKeyInfoDer::from_pem_slice(public_pem.as_bytes())
        .map_err(|e| format!("the public key is not PEM: {e}"))?;
    let public = spki
        .strip_prefix(&RSA_2048_SPKI_HEADER[..])
        .ok_or("the public key is not a 2048-bit RSA key")?;
    let (unsigned, signature) = jwt.rsplit_once('.').ok_or("not a JWT")?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|e| format!("the signature is not base64url: {e}"))?;
    ring::signature::UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public)
        .verify(unsigned.as_bytes(), &signature)
        .map_err(|_| "the RS256 signature does not verify")?;
    let decoded = jsonwebtoken::dangerous::insecure_decode::<T>(jwt)
        .map_err(|e| format!("the header or claims do not decode: {e}"))?;
    if decoded.header.alg != jsonwebtoken::Algorithm::RS256 {
        return Err(format!(
            "signed with RS256, but says {:?}",
            decoded.header.alg
        ));
    }
    Ok(decoded)
}

/// A JWT with the header `{"typ":"JWT","alg":"RS256"}` and `claims`, signed with the RSA key in
/// `private_pem` (a PEM `PRIVATE KEY`, PKCS#8, as in a service-account key file).
pub fn sign_rs256(claims: &impl Serialize, private_pem: &str) -> String {
    let der = PrivatePkcs8KeyDer::from_pem_slice(private_pem.as_bytes()).unwrap();
    let key = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap();
    let part = |value: Vec<u8>| URL_SAFE_NO_PAD.encode(value);
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    let unsigned = format!(
        "{}.{}",
        part(serde_json::to_vec(&header).unwrap()),
        part(serde_json::to_vec(claims).unwrap())
    );
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        unsigned.as_bytes(),
        &mut signature,
    )
    .unwrap();
    format!("{unsigned}.{}", part(signature))
}
